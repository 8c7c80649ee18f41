// A consumer of the installed moex package: the README's two examples (an experts call through the registry, and the
// model API of include/moex/model.h) compiled and run outside the source tree. argv[1]: a model directory.
#include <moex/backend.h>
#include <moex/model.h>

#include <cstdio>
#include <vector>

int main(int argc, char** argv) {
    if (argc < 2) {
        std::fprintf(stderr, "usage: moex_consumer MODEL_DIR\n");
        return 2;
    }
    // One experts call: T = 2 tokens, H = 4, I = 2, E = 2 experts, k = 1.
    std::vector<float> x(2 * 4, 0.5f), w_up(2 * 4 * 4, 0.1f), w_down(2 * 4 * 2, 0.2f), w(2, 1.0f), out(2 * 4, -1.0f);
    std::vector<int32_t> ids = {0, 1};
    moex::ExpertsProblem p;
    p.hidden_states = moex::TensorView::contiguous(x.data(), moex::DType::kF32, {2, 4});
    p.top_k_index = moex::TensorView::contiguous(ids.data(), moex::DType::kI32, {2, 1});
    p.top_k_weights = moex::TensorView::contiguous(w.data(), moex::DType::kF32, {2, 1});
    p.gate_up_proj = moex::TensorView::contiguous(w_up.data(), moex::DType::kF32, {2, 4, 4});
    p.down_proj = moex::TensorView::contiguous(w_down.data(), moex::DType::kF32, {2, 4, 2});
    moex::ExpertsInterface::global().run("grouped_mm", p,
                                         moex::TensorView::contiguous(out.data(), moex::DType::kF32, {2, 4}));
    std::printf("experts: out[0] = %.6f\n", out[0]);

    // The model API, as include/moex/model.h shows it.
    auto model = moex::Model::from_pretrained(
        argv[1], {.experts_implementation = moex::ExpertsImplementation::per_config_map({{"", "eager"}})});
    model.set_experts_implementation(moex::ExpertsImplementation::name("batched_mm"));
    auto result = model.generate("And God said,", {.max_new_tokens = 8, .temperature = 0.8, .seed = 1});
    std::printf("model: %zu new tokens with %s: %s\n", result.new_ids.size(), model.experts_backend().c_str(),
                result.text.c_str());
    return result.new_ids.empty() ? 1 : 0;
}
