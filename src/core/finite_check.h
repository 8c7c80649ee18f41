// The finite-check debug mode (MOEX_CHECK_FINITE=1 or RunOptions::check_finite): after an experts call, an output that
// is not finite is traced on the host, in float64 from the problem's own tensors, to its first token row, the first
// expert of that row that made it and the stage: the input row, the routing weight, the up projection, the
// activation, the down projection or the weighted sum.
#pragma once

#include <string_view>

#include "moex/backend.h"

namespace moex::core {

// Whether the check runs for this call: options.check_finite, or MOEX_CHECK_FINITE set to anything but "" or "0".
bool finite_check_on(const RunOptions& options);

// When finite_check_on(options) and `out` (what `backend` computed for p) holds a NaN or an infinity: throws
// Error(kNonFinite) naming the row, the expert and slot, the stage and the value that broke. Ids outside [0, E) are
// never blamed (they contribute nothing). On CUDA it synchronizes options.cuda_stream and copies what it reads to
// the host, so it is for eager debugging, not for CUDA-graph capture.
void check_finite(const ExpertsProblem& p, const TensorView& out, const RunOptions& options, std::string_view backend);

}  // namespace moex::core
