// A one-line progress bar on stderr for long loads ("loading DIR  42% [########           ] 1.2 / 2.9 GB"),
// redrawn in place with \r at most every 100 ms and erased when the object is destroyed. Silent unless enabled.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace moex::model {

class ProgressBar {
   public:
    // `enabled` is the caller's choice; the bar also stays silent unless stderr is a terminal.
    ProgressBar(std::string label, uint64_t total_bytes, bool enabled);
    ~ProgressBar();
    ProgressBar(const ProgressBar&) = delete;
    ProgressBar& operator=(const ProgressBar&) = delete;

    void advance(uint64_t bytes);
    bool active() const { return active_; }

   private:
    void draw();

    std::string label_;
    uint64_t total_ = 0, done_ = 0;
    bool active_ = false;
    size_t drawn_width_ = 0;  // characters of the last line drawn, to erase it
    std::chrono::steady_clock::time_point last_draw_{};
};

// "1.2 GB", "340.0 MB", "12 B": for the bar and for messages.
std::string human_bytes(uint64_t bytes);

}  // namespace moex::model
