// The in-memory Transport: R endpoints in one process (one thread each) meeting at a barrier. It simulates an EP
// group for CPU tests; an exchange copies what every rank published once all have published.
#include <barrier>
#include <cstring>
#include <mutex>
#include <string>

#include "moex/ep.h"
#include "moex/error.h"

namespace moex {
namespace {

struct Hub {
    explicit Hub(int ranks) : R(ranks), meet(ranks), send(size_t(ranks)), counts(size_t(ranks)) {}
    const int R;
    std::barrier<> meet;
    std::vector<const std::vector<SendChunk>*> send;  // (R) what each rank published for this exchange
    std::vector<const int64_t*> counts;               // (R)
};

class MemoryTransport final : public Transport {
   public:
    MemoryTransport(std::shared_ptr<Hub> hub, int rank) : hub_(std::move(hub)), rank_(rank) {}
    int rank() const override { return rank_; }
    int size() const override { return hub_->R; }
    Device device() const override { return Device::kCPU; }

    void all_to_all(const std::vector<SendChunk>& send, const std::vector<RecvChunk>& recv) override {
        const int R = hub_->R;
        MOEX_REQUIRE(int(send.size()) == R && int(recv.size()) == R, ErrorCode::kInvalidArgument,
                     "all_to_all needs one send and one recv chunk per rank");
        hub_->send[size_t(rank_)] = &send;
        hub_->meet.arrive_and_wait();  // all published
        std::string error;
        for (int s = 0; s < R; ++s) {
            const SendChunk& c = (*hub_->send[size_t(s)])[size_t(rank_)];
            if (c.bytes != recv[size_t(s)].bytes) {
                error = "all_to_all: rank " + std::to_string(s) + " sends " + std::to_string(c.bytes) +
                        " bytes to rank " + std::to_string(rank_) + ", which expects " +
                        std::to_string(recv[size_t(s)].bytes);
                break;
            }
            if (c.bytes > 0) std::memcpy(recv[size_t(s)].data, c.data, size_t(c.bytes));
        }
        hub_->meet.arrive_and_wait();  // all copied: the senders' buffers may change again
        MOEX_REQUIRE(error.empty(), ErrorCode::kInvalidArgument, error);
    }

    void exchange_counts(const int64_t* send, int64_t* recv) override {
        hub_->counts[size_t(rank_)] = send;
        hub_->meet.arrive_and_wait();
        for (int s = 0; s < hub_->R; ++s) recv[s] = hub_->counts[size_t(s)][rank_];
        hub_->meet.arrive_and_wait();
    }

   private:
    std::shared_ptr<Hub> hub_;
    int rank_;
};

}  // namespace

std::vector<std::unique_ptr<Transport>> make_memory_transports(int ranks) {
    MOEX_REQUIRE(ranks >= 1, ErrorCode::kInvalidArgument, "an EP group needs at least one rank");
    auto hub = std::make_shared<Hub>(ranks);
    std::vector<std::unique_ptr<Transport>> out;
    for (int r = 0; r < ranks; ++r) out.push_back(std::make_unique<MemoryTransport>(hub, r));
    return out;
}

}  // namespace moex
