// The recorded decode step (issue #12 item 3): on CUDA a decode step is ~90 launches of small kernels, and launching
// them costs more than they run. The step reads its token and position from device memory (embed_device and
// Position::device), so one recording serves every token: the first step of a (backend, scratch) pair runs unrecorded
// (it sizes the ops' scratch, which must not grow under capture), the second is recorded and replayed, and every
// later one is replayed. The greedy argmax and the position's advance are part of the step, so a greedy generation
// copies nothing to the device per token; the host reads the token the argmax stored into pinned memory.
#include <string>

#include "moex/error.h"
#include "src/model/model_impl.h"
#include "src/model/ops/views.h"

namespace moex {

bool Model::Impl::decode_recorded(int32_t last, const Backend& backend) {
    DecodeGraph& g = decode_graph;
    if (!options.decode_graph || options.device != Device::kCUDA || !g.broken.empty() ||
        backend.host_synchronizes(Device::kCUDA))
        return false;
    check_step({last});
    ensure_scratch(1);
    if (!g.id.view().defined()) {
        g.id = model::buffer(DType::kI32, 1, 1, options.device);
        g.pos = model::buffer(DType::kI64, 1, 1, options.device);
    }
    model::Ops& o = *ops;
    // The device copies of the token and position, unless the last replay's argmax and advance left them there.
    if (g.device_id != last) {
        o.upload(g.id.view(), &last);
        g.device_id = last;
    }
    if (g.device_pos != cache_length) {
        const int64_t pos = cache_length;
        o.upload(g.pos.view(), &pos);
        g.device_pos = pos;
    }

    const TensorView id = g.id.view(), pos = g.pos.view();
    auto step = [&] {
        o.embed_device(id, weights.embed.view(), model::first_rows(scratch.x, 1));
        decoder(1, model::Position(cache_length, pos.ptr<int64_t>()), backend);
        o.argmax_step(scratch.logits.view(), id, pos);
    };
    // A recording made before the ops' scratch was reallocated (a longer prompt's prefill) is stale: warm up again.
    const bool stale = g.recording && !g.recording->current();
    if (stale || g.backend != &backend || g.scratch != scratch.x.view().data) {
        // The unrecorded first step for this backend and scratch: it runs the ops as they will be recorded and sizes
        // their scratch.
        g.recording.reset();
        g.backend = &backend;
        g.scratch = scratch.x.view().data;
        try {
            step();
        } catch (const Error& e) {
            if (e.code() != ErrorCode::kUnsupported) throw;
            // An op the recorded step cannot use (attention outside the decode kernel). It throws before any experts
            // call (layer 0's attention), and the caller runs the step again unrecorded over the same cache rows.
            g.broken = e.what();
            g.device_id.reset(), g.device_pos.reset();
            return false;
        }
    } else {
        if (!g.recording) {
            g.recording_now = true;
            try {
                g.recording = o.record(step);
            } catch (const Error& e) {
                // Something in the step synchronises or allocates under capture (a user backend, the finite check):
                // nothing of it ran, and this model decodes unrecorded from now on.
                g.recording_now = false;
                g.broken = e.what();
                return false;
            }
            g.recording_now = false;
        }
        if (observer)
            for (int64_t l = 0; l < config.num_hidden_layers; ++l)
                if (weights.layers[size_t(l)].is_moe()) observer(l, std::string(backend.name()), 1);
        g.recording->replay();
    }
    g.device_id.reset();  // the argmax's token: known to the host once it reads it (recorded_argmax)
    g.device_pos = cache_length + 1;
    cache_length += 1;
    return true;
}

int32_t Model::Impl::recorded_argmax() {
    const int32_t id = int32_t(ops->last_argmax());
    decode_graph.device_id = id;
    return id;
}

}  // namespace moex
