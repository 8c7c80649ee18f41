// Expert parallelism: experts sharded by rank (EpShard), the reference EP router (global ids -> local ids with
// sentinels), a Transport contract (NCCL across processes, in-memory across threads for tests) and EpRunner, which
// dispatches tokens to the ranks owning their experts, runs any registered backend on the local shard and combines.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "moex/backend.h"
#include "moex/experts.h"

namespace moex {

// Rank `rank` of `ep_size` owns the global experts [first(), first() + local()).
struct EpShard {
    int64_t num_experts = 0;  // E, global
    int ep_size = 1;          // R
    int rank = 0;
    int64_t local() const { return num_experts / ep_size; }  // E_loc; also the sentinel id on this rank
    int64_t first() const { return int64_t(rank) * local(); }
    int owner(int64_t global_id) const { return int(global_id / local()); }  // for ids in [0, E)
};

// Throws Error(kInvalidArgument) "num_experts must be divisible by ep_size: num_experts=E, ep_size=R" (as the
// reference's ValueError says), and for ep_size < 1 or a rank outside [0, ep_size).
EpShard make_ep_shard(int64_t num_experts, int ep_size, int rank);

// The rank's slice of a full problem's expert tensors (gate_up_proj, down_proj, biases: dim 0 sliced, no copy);
// hidden states, ids and weights are passed through unchanged.
ExpertsProblem shard_experts(const ExpertsProblem& full, const EpShard& shard);

// The reference EP router (EpRouterParallel) on host tensors (T, k): a slot whose global id this rank owns gets
// id - first(); any other slot (another rank's expert, or an id outside [0, E)) gets the sentinel local() and weight 0.
// Outputs have the inputs' shapes and dtypes; they may alias the inputs.
void ep_route_local(const TensorView& global_ids, const TensorView& weights, const EpShard& shard,
                    const TensorView& local_ids, const TensorView& local_weights);

// ---- transport ----
struct SendChunk {
    const void* data;
    int64_t bytes;
};
struct RecvChunk {
    void* data;
    int64_t bytes;
};

// A group of `size()` ranks exchanging bytes. Every rank calls the collectives in the same order; chunk sizes must
// match pairwise (what rank s sends to r is what r expects from s). Data buffers live on device().
class Transport {
   public:
    virtual ~Transport() = default;
    virtual int rank() const = 0;
    virtual int size() const = 0;
    virtual Device device() const = 0;
    virtual void* stream() const { return nullptr; }  // CUDA: the cudaStream_t the collectives are ordered on
    // send[d] goes to rank d, recv[s] comes from rank s (both of size size()); returns when recv is complete.
    virtual void all_to_all(const std::vector<SendChunk>& send, const std::vector<RecvChunk>& recv) = 0;
    // One int64 to and from every rank (host memory): send (R), recv (R).
    virtual void exchange_counts(const int64_t* send, int64_t* recv) = 0;
};

// R endpoints of one in-process group: endpoint r must be used by exactly one thread, all R threads together.
std::vector<std::unique_ptr<Transport>> make_memory_transports(int ranks);

// The NCCL group of this process from RANK, WORLD_SIZE, LOCAL_RANK (the GPU) and MOEX_NCCL_ID_FILE (a path on a
// filesystem all ranks share; rank 0 writes the ncclUniqueId there). Sets NCCL_NVLS_ENABLE=0 before the init.
// Error(kUnsupported) in a build without NCCL.
std::unique_ptr<Transport> make_nccl_transport_from_env();
bool nccl_available();  // whether this build has NCCL

// ---- dispatch / compute / combine ----
enum class EpCombine : uint8_t {
    // Each (token, slot) result comes back unweighted; the token's rank sums w_j * y_j in slot order 0..k-1 in f32
    // and rounds once: for f32 the bytes of a single-rank run of the same backend (CPU; CUDA eager/grouped_mm).
    kSlotOrder,
    // DeepEP-style: each rank returns one weighted partial (T_r, H) per token; the token's rank adds them in rank
    // order 0..R-1 in f32 and rounds once. Deterministic, k/R times less combine traffic, not single-rank bytes.
    kRankOrder,
};

struct EpOptions {
    std::string backend = "grouped_mm";  // any name of ExpertsInterface::global()
    EpCombine combine = EpCombine::kSlotOrder;
    RunOptions run;  // cuda_stream is replaced by the transport's stream
};

struct EpStats {
    int64_t tokens = 0;          // T of this rank
    int64_t sent_rows = 0;       // token rows dispatched (to any rank, self included)
    int64_t received_rows = 0;   // token rows received
    int64_t computed_rows = 0;   // rows the local backend ran (slot rows for kSlotOrder)
    int64_t dispatch_bytes = 0;  // bytes this rank sent to OTHER ranks in dispatch (hidden rows + ids/weights)
    int64_t combine_bytes = 0;   // bytes this rank sent to OTHER ranks in combine
    double dispatch_s = 0, compute_s = 0, combine_s = 0;  // wall time of each phase (device-synchronised)
};

// Runs one EP experts call on this rank. `local`: hidden_states (T, H), top_k_index (T, k) GLOBAL ids in [0, E)
// (others contribute zero), top_k_weights (T, k), expert tensors of this rank's shard (E_loc, ...); all on
// transport.device(). out: (T, H). Keeps its workspace between calls.
class EpRunner {
   public:
    EpRunner(Transport& transport, const EpShard& shard);
    ~EpRunner();
    EpStats run(const ExpertsProblem& local, const TensorView& out, const EpOptions& options);

   private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace moex
