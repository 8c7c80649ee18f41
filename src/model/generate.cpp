// Model::generate: prefill, then the decode loop in the decode phase (transformers' switch: on a non-CPU device every
// grouped_mm entry runs batched_mm until the loop ends, however it ends), each step recorded once and replayed on
// CUDA (decode_step.cpp), with streamed text and timings.
#include <algorithm>
#include <chrono>

#include "moex/error.h"
#include "src/model/model_impl.h"
#include "src/model/sampler.h"

namespace moex {
namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

double GenerationResult::prefill_tokens_per_second() const {
    return prefill_seconds > 0 ? double(prompt_ids.size()) / prefill_seconds : 0.0;
}
double GenerationResult::decode_tokens_per_second() const {
    return decode_seconds > 0 && new_ids.size() > 1 ? double(new_ids.size() - 1) / decode_seconds : 0.0;
}

GenerationResult Model::generate(const std::string& prompt, const SamplingOptions& sampling,
                                 const std::function<bool(int32_t, const std::string&)>& on_token) {
    MOEX_REQUIRE(impl_->tokenizer.has_value(), ErrorCode::kInvalidArgument,
                 "this model has no tokenizer.json: give token ids instead of text");
    return generate(impl_->tokenizer->encode(prompt, true), sampling, on_token);
}

GenerationResult Model::generate(const std::vector<int32_t>& prompt_ids, const SamplingOptions& sampling,
                                 const std::function<bool(int32_t, const std::string&)>& on_token) {
    Impl& m = *impl_;
    GenerationResult r;
    r.prompt_ids = prompt_ids;
    MOEX_REQUIRE(!prompt_ids.empty(), ErrorCode::kInvalidArgument, "generate: the prompt has no tokens");
    MOEX_REQUIRE(int64_t(prompt_ids.size()) < m.max_context, ErrorCode::kInvalidArgument,
                 "the prompt has " + std::to_string(prompt_ids.size()) + " tokens; the model's context (max_context " +
                     std::to_string(m.max_context) + ") leaves room for at most " + std::to_string(m.max_context - 1) +
                     " prompt tokens");
    MOEX_REQUIRE(sampling.max_new_tokens >= 0, ErrorCode::kInvalidArgument, "max_new_tokens must be >= 0");
    const bool greedy = sampling.temperature <= 0;
    std::optional<model::Sampler> sampler;
    if (!greedy) sampler.emplace(sampling.temperature, sampling.top_k, sampling.top_p, sampling.seed);
    const std::vector<int32_t>& eos = sampling.eos_token_ids.empty() ? m.config.eos_token_ids : sampling.eos_token_ids;
    std::optional<TokenStreamer> streamer;
    if (m.tokenizer) streamer.emplace(*m.tokenizer, true);

    auto pick = [&]() -> int32_t {
        if (greedy) return int32_t(m.ops->argmax(m.scratch.logits.view()));
        std::vector<float> logits(size_t(m.config.vocab_size));
        m.ops->logits_to_host(m.scratch.logits.view(), logits.data());
        return sampler->sample(logits);
    };
    bool stop = false;
    auto emit = [&](int32_t id) {
        r.new_ids.push_back(id);
        const std::string piece = streamer ? streamer->push(id) : std::string();
        r.text += piece;
        if (sampling.stop_on_eos && std::find(eos.begin(), eos.end(), id) != eos.end()) {
            r.stopped_on_eos = true;
            stop = true;
        }
        if (on_token && !on_token(id, piece)) stop = true;
    };

    reset();
    if (sampling.max_new_tokens == 0) return r;
    const auto t0 = std::chrono::steady_clock::now();
    m.forward_to_logits(prompt_ids, m.experts->backend());
    const int32_t first = pick();
    r.prefill_seconds = seconds_since(t0);
    const auto t1 = std::chrono::steady_clock::now();
    emit(first);
    {
        // The decode phase: the backend of each step is the decode map's (a set_experts_implementation from on_token
        // takes effect at the next step and stays after the call; transformers would restore the old choice).
        const model::ExpertsImplementationState::DecodePhase decode(*m.experts);
        int32_t last = first;
        while (!stop && int64_t(r.new_ids.size()) < sampling.max_new_tokens && m.cache_length < m.max_context) {
            const Backend& backend = m.experts->backend();
            if (m.decode_recorded(last, backend)) {
                ++r.recorded_steps;
                last = greedy ? m.recorded_argmax() : pick();
            } else {
                m.forward_to_logits({last}, backend);
                last = pick();
            }
            emit(last);
        }
    }
    r.decode_seconds = seconds_since(t1);
    if (streamer) r.text += streamer->finish();
    return r;
}

}  // namespace moex
