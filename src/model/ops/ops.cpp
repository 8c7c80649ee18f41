// The Ops members that only some devices have: the captured decode step's parts refuse on devices without them.
#include "src/model/ops/ops.h"

#include <string>

#include "moex/error.h"

namespace moex::model {
namespace {

[[noreturn]] void no_graphs(const Ops& ops, const char* op) {
    fail(ErrorCode::kUnsupported, std::string("ops.") + op + ": recorded decode steps need CUDA; these ops run on " +
                                      std::string(device_name(ops.device())));
}

}  // namespace

void Ops::embed_device(const TensorView&, const TensorView&, const TensorView&) { no_graphs(*this, "embed_device"); }
void Ops::argmax_step(const TensorView&, const TensorView&, const TensorView&) { no_graphs(*this, "argmax_step"); }
int64_t Ops::last_argmax() { no_graphs(*this, "last_argmax"); }
void Ops::upload(const TensorView&, const void*) { no_graphs(*this, "upload"); }
std::unique_ptr<Recording> Ops::record(const std::function<void()>&) { no_graphs(*this, "record"); }

}  // namespace moex::model
