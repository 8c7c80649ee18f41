// The loading progress bar: bytes loaded / total on one stderr line, only when stderr is a terminal.
#include "src/model/weights/progress.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>

namespace moex::model {

std::string human_bytes(uint64_t bytes) {
    const char* units[] = {"B", "KB", "MB", "GB", "TB"};
    double v = double(bytes);
    int u = 0;
    while (v >= 1000.0 && u < 4) v /= 1000.0, ++u;
    char buf[32];
    std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.1f %s", v, units[u]);
    return buf;
}

ProgressBar::ProgressBar(std::string label, uint64_t total_bytes, bool enabled)
    : label_(std::move(label)), total_(total_bytes), active_(enabled && total_bytes > 0 && ::isatty(2) == 1) {
    constexpr size_t kMaxLabel = 60;  // keeps the line on one terminal row; the tail of a path says the most
    if (label_.size() > kMaxLabel) label_ = "..." + label_.substr(label_.size() - (kMaxLabel - 3));
    if (active_) draw();
}

ProgressBar::~ProgressBar() {
    if (!active_ || drawn_width_ == 0) return;
    std::fprintf(stderr, "\r%*s\r", int(drawn_width_), "");
    std::fflush(stderr);
}

void ProgressBar::advance(uint64_t bytes) {
    done_ = done_ + bytes > total_ ? total_ : done_ + bytes;
    if (!active_) return;
    const auto now = std::chrono::steady_clock::now();
    if (done_ < total_ && now - last_draw_ < std::chrono::milliseconds(100)) return;
    draw();
}

void ProgressBar::draw() {
    constexpr int kWidth = 24;
    last_draw_ = std::chrono::steady_clock::now();
    const double frac = total_ == 0 ? 1.0 : double(done_) / double(total_);
    const int filled = int(frac * kWidth);
    std::string bar(size_t(filled), '#');
    bar.resize(kWidth, ' ');
    char line[512];
    const int n = std::snprintf(line, sizeof line, "\r%s %3d%% [%s] %s / %s", label_.c_str(), int(frac * 100),
                                bar.c_str(), human_bytes(done_).c_str(), human_bytes(total_).c_str());
    const size_t width = n > 1 ? size_t(n - 1) : 0;
    std::fputs(line, stderr);
    if (width < drawn_width_) std::fprintf(stderr, "%*s", int(drawn_width_ - width), "");
    std::fflush(stderr);
    drawn_width_ = std::max(width, drawn_width_);
}

}  // namespace moex::model
