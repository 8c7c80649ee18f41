// The NCCL Transport: one process per GPU, ranks from RANK / WORLD_SIZE / LOCAL_RANK, the ncclUniqueId shared
// through a file (MOEX_NCCL_ID_FILE), all-to-all as grouped ncclSend/ncclRecv on a private stream.
#include <cuda_runtime.h>
#include <nccl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "moex/ep.h"
#include "moex/error.h"

namespace moex {
namespace {

void check_cuda(cudaError_t e, const char* what) {
    if (e != cudaSuccess) fail(ErrorCode::kCuda, std::string("ep/nccl: ") + what + ": " + cudaGetErrorString(e));
}
void check_nccl(ncclResult_t r, const char* what, ncclComm_t comm = nullptr) {
    if (r == ncclSuccess) return;
    std::string msg = std::string("ep/nccl: ") + what + ": " + ncclGetErrorString(r);
    if (comm != nullptr) {
        const char* last = ncclGetLastError(comm);
        if (last != nullptr && *last) msg += std::string(" (") + last + ")";
    }
    fail(ErrorCode::kCuda, msg);
}

int env_int(const char* name, int fallback) {
    const char* v = std::getenv(name);
    if (v == nullptr || *v == 0) return fallback;
    char* end = nullptr;
    const long x = std::strtol(v, &end, 10);
    MOEX_REQUIRE(end != nullptr && *end == 0 && x >= 0, ErrorCode::kInvalidArgument,
                 std::string("ep/nccl: ") + name + "=" + v + " is not a non-negative integer");
    return int(x);
}

// Rank 0 publishes the id atomically (write + rename); the others poll for it for up to 120 s.
ncclUniqueId share_unique_id(int rank, const std::string& path) {
    ncclUniqueId id{};
    if (rank == 0) {
        check_nccl(ncclGetUniqueId(&id), "ncclGetUniqueId");
        const std::string tmp = path + ".tmp" + std::to_string(::getpid());
        {
            std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
            f.write(reinterpret_cast<const char*>(&id), sizeof id);
            MOEX_REQUIRE(f.good(), ErrorCode::kIo, "ep/nccl: cannot write the NCCL id to " + tmp);
        }
        std::error_code ec;
        std::filesystem::rename(tmp, path, ec);
        MOEX_REQUIRE(!ec, ErrorCode::kIo, "ep/nccl: cannot rename " + tmp + " to " + path + ": " + ec.message());
        return id;
    }
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    while (std::chrono::steady_clock::now() < deadline) {
        std::error_code ec;
        if (std::filesystem::file_size(path, ec) == sizeof id && !ec) {
            std::ifstream f(path, std::ios::binary);
            f.read(reinterpret_cast<char*>(&id), sizeof id);
            if (f.good()) return id;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    fail(ErrorCode::kIo, "ep/nccl: rank " + std::to_string(rank) + " waited 120 s for the NCCL id file " + path +
                             " (is rank 0 running, with the same MOEX_NCCL_ID_FILE?)");
}

class NcclTransport final : public Transport {
   public:
    NcclTransport(int rank, int size, int device, const std::string& id_path) : rank_(rank), size_(size) {
        check_cuda(cudaSetDevice(device), "cudaSetDevice(LOCAL_RANK)");
        const ncclUniqueId id = share_unique_id(rank, id_path);
        check_nccl(ncclCommInitRank(&comm_, size, id, rank), "ncclCommInitRank");
        check_cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
        check_cuda(cudaMalloc(&counts_, size_t(2 * size) * sizeof(int64_t)), "cudaMalloc (counts)");
    }
    ~NcclTransport() override {
        if (counts_ != nullptr) cudaFree(counts_);
        if (stream_ != nullptr) cudaStreamDestroy(stream_);
        if (comm_ != nullptr) ncclCommDestroy(comm_);
    }
    int rank() const override { return rank_; }
    int size() const override { return size_; }
    Device device() const override { return Device::kCUDA; }
    void* stream() const override { return stream_; }

    void all_to_all(const std::vector<SendChunk>& send, const std::vector<RecvChunk>& recv) override {
        MOEX_REQUIRE(int(send.size()) == size_ && int(recv.size()) == size_, ErrorCode::kInvalidArgument,
                     "all_to_all needs one send and one recv chunk per rank");
        const SendChunk& self = send[size_t(rank_)];
        MOEX_REQUIRE(self.bytes == recv[size_t(rank_)].bytes, ErrorCode::kInvalidArgument,
                     "all_to_all: the self chunk sizes differ");
        if (self.bytes > 0)  // the self block never touches NCCL: one device copy
            check_cuda(cudaMemcpyAsync(recv[size_t(rank_)].data, self.data, size_t(self.bytes),
                                       cudaMemcpyDeviceToDevice, stream_),
                       "cudaMemcpyAsync (self block)");
        check_nccl(ncclGroupStart(), "ncclGroupStart");
        for (int p = 0; p < size_; ++p) {  // both sides know every size, so empty blocks are skipped on both
            if (p == rank_) continue;
            if (send[size_t(p)].bytes > 0)
                check_nccl(ncclSend(send[size_t(p)].data, size_t(send[size_t(p)].bytes), ncclUint8, p, comm_, stream_),
                           "ncclSend", comm_);
            if (recv[size_t(p)].bytes > 0)
                check_nccl(ncclRecv(recv[size_t(p)].data, size_t(recv[size_t(p)].bytes), ncclUint8, p, comm_, stream_),
                           "ncclRecv", comm_);
        }
        check_nccl(ncclGroupEnd(), "ncclGroupEnd", comm_);
        check_cuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize (all_to_all)");
    }

    void exchange_counts(const int64_t* send, int64_t* recv) override {
        const size_t bytes = size_t(size_) * sizeof(int64_t);
        check_cuda(cudaMemcpyAsync(counts_, send, bytes, cudaMemcpyHostToDevice, stream_), "cudaMemcpyAsync (counts)");
        std::vector<SendChunk> s;
        std::vector<RecvChunk> r;
        for (int p = 0; p < size_; ++p) {
            s.push_back({counts_ + p, sizeof(int64_t)});
            r.push_back({counts_ + size_ + p, sizeof(int64_t)});
        }
        all_to_all(s, r);
        check_cuda(cudaMemcpyAsync(recv, counts_ + size_, bytes, cudaMemcpyDeviceToHost, stream_),
                   "cudaMemcpyAsync (counts)");
        check_cuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize (counts)");
    }

   private:
    int rank_, size_;
    ncclComm_t comm_ = nullptr;
    cudaStream_t stream_ = nullptr;
    int64_t* counts_ = nullptr;  // (2R) device: counts to send, counts received
};

}  // namespace

bool nccl_available() { return true; }

std::unique_ptr<Transport> make_nccl_transport_from_env() {
    // NVLink multicast (NVLS) can take a shared host's GPUs down: it stays off whatever the caller's environment says.
    ::setenv("NCCL_NVLS_ENABLE", "0", 1);
    const int size = env_int("WORLD_SIZE", 1), rank = env_int("RANK", 0), local = env_int("LOCAL_RANK", rank);
    MOEX_REQUIRE(size >= 1 && rank < size, ErrorCode::kInvalidArgument,
                 "ep/nccl: RANK=" + std::to_string(rank) + " is outside WORLD_SIZE=" + std::to_string(size));
    const char* file = std::getenv("MOEX_NCCL_ID_FILE");
    const char* port = std::getenv("MASTER_PORT");
    const std::string path =
        file != nullptr && *file ? std::string(file) : "/tmp/moex_nccl_id_" + std::string(port ? port : "29500");
    return std::make_unique<NcclTransport>(rank, size, local, path);
}

}  // namespace moex
