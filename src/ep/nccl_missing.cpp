// Builds without NCCL: the NCCL transport is reported missing (the in-memory transport and the rest of EP remain).
#include "moex/ep.h"
#include "moex/error.h"

namespace moex {

bool nccl_available() { return false; }

std::unique_ptr<Transport> make_nccl_transport_from_env() {
    fail(ErrorCode::kUnsupported,
         "this build of moex has no NCCL (configure with CUDA and NCCL found, MOEX_NCCL=AUTO|ON, NCCL_ROOT=...)");
}

}  // namespace moex
