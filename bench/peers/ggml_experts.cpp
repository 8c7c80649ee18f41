// ggml_experts: llama.cpp's experts layer on the CPU, timed the way `moex bench` times moex's: the graph
// llama.cpp builds for a MoE FFN (ggml_mul_mat_id over the stacked gate/up weights, ggml_swiglu_split, ggml_mul_mat_id
// over the down weights, times the routing weights, the k slots summed by ggml_add), the same shapes (common/shapes.h),
// the same E reduction and weight-set rotation past the last-level cache, k distinct uniform experts per token with a
// new routing every repetition, median of the repetitions. Built against ggml by bench/peers/ggml.sh (ggml is not
// a dependency of moex); prints a table or `hf_cpu_bench.py --combine` JSON lines (impl "llama.cpp").
//   ggml_experts --shapes qwen3-30b-a3b --tokens 1,8,64 --weights f16|bf16|f32|q8_0|q4_0|mxfp4|nvfp4 [--threads N]
//                [--reps 5]
//                [--case-seconds 10] [--max-weight-gb 6] [--json]
#include <ggml-cpu.h>
#include <ggml.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/shapes.h"

namespace {

struct Options {
    std::vector<std::string> shapes{"qwen3-30b-a3b"};
    std::vector<int64_t> tokens{1, 8, 64};
    std::string weights = "f16";
    int threads = int(std::thread::hardware_concurrency());
    int reps = 5;
    double case_seconds = 10.0, max_weight_gb = 6.0;
    bool json = false;
};

[[noreturn]] void die(const std::string& what) {
    std::fprintf(stderr, "ggml_experts: error: %s\n", what.c_str());
    std::exit(2);
}

std::vector<std::string> split(const std::string& s) {
    std::vector<std::string> out;
    std::stringstream in(s);
    for (std::string part; std::getline(in, part, ',');)
        if (!part.empty()) out.push_back(part);
    return out;
}

int64_t to_int(const std::string& s, const char* what) {
    char* end = nullptr;
    const long long v = std::strtoll(s.c_str(), &end, 10);
    if (end == s.c_str() || *end != '\0' || v <= 0)
        die(std::string(what) + " takes positive integers, not `" + s + "`");
    return v;
}

Options parse(int argc, char** argv) {
    Options o;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        auto value = [&]() -> std::string {
            if (i + 1 >= argc) die(a + " needs a value");
            return argv[++i];
        };
        if (a == "--shapes")
            o.shapes = split(value());
        else if (a == "--tokens") {
            o.tokens.clear();
            for (const auto& t : split(value())) o.tokens.push_back(to_int(t, "--tokens"));
        } else if (a == "--weights")
            o.weights = value();
        else if (a == "--threads")
            o.threads = int(to_int(value(), "--threads"));
        else if (a == "--reps")
            o.reps = int(to_int(value(), "--reps"));
        else if (a == "--case-seconds")
            o.case_seconds = std::atof(value().c_str());
        else if (a == "--max-weight-gb")
            o.max_weight_gb = std::atof(value().c_str());
        else if (a == "--json")
            o.json = true;
        else
            die("unknown argument `" + a + "`");
    }
    return o;
}

ggml_type weight_type(const std::string& name) {
    if (name == "f16") return GGML_TYPE_F16;
    if (name == "bf16") return GGML_TYPE_BF16;
    if (name == "f32") return GGML_TYPE_F32;
    if (name == "q8_0") return GGML_TYPE_Q8_0;
    if (name == "q4_0") return GGML_TYPE_Q4_0;
    if (name == "mxfp4") return GGML_TYPE_MXFP4;
    if (name == "nvfp4") return GGML_TYPE_NVFP4;
    die("--weights is f16, bf16, f32, q8_0, q4_0, mxfp4 or nvfp4, not `" + name + "`");
}

int64_t llc_bytes() {  // the largest data or unified cache of cpu0, as bench/cases.cpp and hf_cpu_bench.py read it
    int64_t best = 0;
    for (int i = 0; i < 8; ++i) {
        const std::string d = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(i) + "/";
        std::ifstream type(d + "type"), size(d + "size");
        std::string kind, text;
        if (!(type >> kind) || !(size >> text) || kind == "Instruction" || text.empty()) continue;
        const int64_t mult = text.back() == 'K'   ? 1 << 10
                             : text.back() == 'M' ? 1 << 20
                             : text.back() == 'G' ? 1 << 30
                                                  : 1;
        best = std::max<int64_t>(best, std::atoll(text.c_str()) * mult);
    }
    return best > 0 ? best : int64_t(32) << 20;
}

std::string cpu_model() {
    std::ifstream in("/proc/cpuinfo");
    for (std::string line; std::getline(in, line);)
        if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
    return "unknown CPU";
}

// One weight set: the experts' stacked gate/up (ggml [H, 2I, E]: gate rows first, as llama.cpp's merged
// ffn_gate_up_exps) and down ([I, H, E]) weights, uniform in +-0.03 (converted or quantized by ggml).
struct WeightSet {
    ggml_context* ctx = nullptr;
    ggml_tensor *up = nullptr, *down = nullptr;
};

void fill(ggml_tensor* t, uint64_t seed) {
    const int64_t rows = ggml_nrows(t), n = t->ne[0];
    std::vector<float> row(static_cast<size_t>(n));
    std::mt19937_64 gen(seed);
    std::uniform_real_distribution<float> dist(-0.03f, 0.03f);
    for (int64_t r = 0; r < rows; ++r) {
        for (auto& v : row) v = dist(gen);
        char* dst = static_cast<char*>(t->data) + r * t->nb[1];
        if (t->type == GGML_TYPE_F32)
            std::memcpy(dst, row.data(), size_t(n) * 4);
        else
            ggml_quantize_chunk(t->type, row.data(), dst, 0, 1, n, nullptr);
    }
}

WeightSet make_weights(const moex::shapes::ExpertsShape& s, int64_t E, ggml_type type, uint64_t seed) {
    WeightSet w;
    const size_t bytes = ggml_row_size(type, s.H) * size_t(2 * s.I * E) + ggml_row_size(type, s.I) * size_t(s.H * E);
    ggml_init_params p{bytes + 4 * ggml_tensor_overhead() + (size_t(1) << 20), nullptr, false};
    w.ctx = ggml_init(p);
    if (w.ctx == nullptr) die("cannot allocate " + std::to_string(bytes >> 20) + " MiB of weights");
    w.up = ggml_new_tensor_3d(w.ctx, type, s.H, 2 * s.I, E);
    w.down = ggml_new_tensor_3d(w.ctx, type, s.I, s.H, E);
    fill(w.up, seed);
    fill(w.down, seed + 1);
    return w;
}

// The experts layer of llama.cpp's build_moe_ffn (merged gate/up, SiLU gate, weights after the FFN).
struct Layer {
    ggml_context* ctx = nullptr;
    ggml_cgraph* graph = nullptr;
    ggml_tensor *x = nullptr, *ids = nullptr, *weights = nullptr, *out = nullptr;
};

Layer build_layer(const moex::shapes::ExpertsShape& s, int64_t T, const WeightSet& w) {
    Layer l;
    const size_t acts = size_t(T) * size_t(s.k) * size_t(4 * s.I + s.H * (s.k + 2)) * 4 + size_t(T) * s.H * 8;
    ggml_init_params p{acts + 64 * ggml_tensor_overhead() + ggml_graph_overhead() + (size_t(16) << 20), nullptr, false};
    l.ctx = ggml_init(p);
    if (l.ctx == nullptr) die("cannot allocate the activations of T = " + std::to_string(T));
    l.x = ggml_new_tensor_3d(l.ctx, GGML_TYPE_F32, s.H, 1, T);
    l.ids = ggml_new_tensor_2d(l.ctx, GGML_TYPE_I32, s.k, T);
    l.weights = ggml_new_tensor_3d(l.ctx, GGML_TYPE_F32, 1, s.k, T);
    auto* x = static_cast<float*>(l.x->data);  // the same tokens every repetition (the routing changes)
    for (int64_t i = 0; i < ggml_nelements(l.x); ++i) x[i] = 0.01f * float(i % 97) - 0.5f;
    ggml_tensor* gate_up = ggml_mul_mat_id(l.ctx, w.up, l.x, l.ids);  // [2I, k, T]
    ggml_tensor* gate = ggml_view_3d(l.ctx, gate_up, s.I, s.k, T, gate_up->nb[1], gate_up->nb[2], 0);
    ggml_tensor* up = ggml_view_3d(l.ctx, gate_up, s.I, s.k, T, gate_up->nb[1], gate_up->nb[2], s.I * gate_up->nb[0]);
    ggml_tensor* h = ggml_swiglu_split(l.ctx, gate, up);                                    // [I, k, T]
    ggml_tensor* y = ggml_mul(l.ctx, ggml_mul_mat_id(l.ctx, w.down, h, l.ids), l.weights);  // [H, k, T]
    l.graph = ggml_new_graph(l.ctx);
    ggml_build_forward_expand(l.graph, y);
    l.out = ggml_view_2d(l.ctx, y, s.H, T, y->nb[2], 0);
    for (int64_t j = 1; j < s.k; ++j)
        l.out = ggml_add(l.ctx, l.out, ggml_view_2d(l.ctx, y, s.H, T, y->nb[2], size_t(j) * y->nb[1]));
    if (s.k == 1) l.out = ggml_cont(l.ctx, l.out);
    ggml_build_forward_expand(l.graph, l.out);
    return l;
}

// k distinct experts per token, uniform over subsets; softmax weights. Returns the experts touched.
int64_t route(const Layer& l, int64_t T, int64_t E, int64_t k, std::mt19937_64& gen) {
    auto* ids = static_cast<int32_t*>(l.ids->data);
    auto* w = static_cast<float*>(l.weights->data);
    std::vector<int32_t> perm(static_cast<size_t>(E));
    std::normal_distribution<float> normal;
    std::vector<char> hit(static_cast<size_t>(E), 0);
    for (int64_t t = 0; t < T; ++t) {
        std::iota(perm.begin(), perm.end(), 0);
        float sum = 0;
        for (int64_t j = 0; j < k; ++j) {
            std::swap(perm[size_t(j)], perm[size_t(j + int64_t(gen() % uint64_t(E - j)))]);
            ids[t * k + j] = perm[size_t(j)];
            hit[size_t(perm[size_t(j)])] = 1;
            sum += w[t * k + j] = std::exp(normal(gen));
        }
        for (int64_t j = 0; j < k; ++j) w[t * k + j] /= sum;
    }
    return std::count(hit.begin(), hit.end(), 1);
}

}  // namespace

int main(int argc, char** argv) {
    const Options o = parse(argc, argv);
    const ggml_type type = weight_type(o.weights);
    ggml_cpu_init();
    ggml_threadpool_params tpp = ggml_threadpool_params_default(o.threads);
    ggml_threadpool* pool = ggml_threadpool_new(&tpp);
    const int64_t llc = llc_bytes(), max_bytes = int64_t(o.max_weight_gb * double(int64_t(1) << 30));
    if (o.json) {
        std::printf(
            "{\"kind\": \"machine\", \"impl\": \"llama.cpp\", \"cpu\": \"%s\", \"ggml\": \"%s\", "
            "\"threads\": %d, \"weights\": \"%s\"}\n",
            cpu_model().c_str(), ggml_version(), o.threads, o.weights.c_str());
    } else {
        std::printf("llama.cpp ggml %s experts layer (mul_mat_id), %s weights, %d threads, %s\n", ggml_version(),
                    o.weights.c_str(), o.threads, cpu_model().c_str());
        std::printf("%-18s %5s %-11s %12s %8s %7s %7s  reps\n", "shape", "T", "backend", "us", "GFLOP/s", "GB/s",
                    "E_touch");
    }
    for (const std::string& name : o.shapes) {
        const auto* it = std::find_if(moex::shapes::kModelShapes.begin(), moex::shapes::kModelShapes.end(),
                                      [&](const auto& s) { return name == s.name; });
        if (it == moex::shapes::kModelShapes.end()) die("unknown shape `" + name + "`");
        const moex::shapes::ExpertsShape s = *it;
        // bench/cases.cpp's plan: E halved until the set fits --max-weight-gb; sets until 4x the LLC.
        const double per_expert =
            double(ggml_row_size(type, s.H)) * 2 * double(s.I) + double(ggml_row_size(type, s.I)) * double(s.H);
        int64_t E = s.E;
        if (per_expert * double(E) > double(max_bytes)) {
            E = 1;
            while (E * 2 <= s.E && per_expert * double(E * 2) <= double(max_bytes)) E *= 2;
            if (E < s.k) die(name + ": even k experts exceed --max-weight-gb");
        }
        int64_t sets = std::max<int64_t>(1, int64_t(std::ceil(4.0 * double(llc) / (per_expert * double(E)))));
        sets = std::min(sets, std::max<int64_t>(1, int64_t(double(max_bytes) / (per_expert * double(E)))));
        std::vector<WeightSet> ws;
        for (int64_t i = 0; i < sets; ++i) ws.push_back(make_weights(s, E, type, uint64_t(1000 * i + 7)));
        for (const int64_t T : o.tokens) {
            std::vector<Layer> layers;
            for (const auto& w : ws) layers.push_back(build_layer(s, T, w));
            ggml_cplan plan = ggml_graph_plan(layers[0].graph, o.threads, pool);
            std::vector<uint8_t> work(plan.work_size);
            plan.work_data = work.data();
            std::mt19937_64 gen(uint64_t(T) * 1000003u);
            std::vector<double> us;
            std::vector<int64_t> touched;
            double spent = 0;
            for (int r = 0; r <= o.reps; ++r) {  // r = 0 warms up
                Layer& l = layers[size_t(r) % layers.size()];
                const int64_t hit = route(l, T, E, s.k, gen);
                const auto t0 = std::chrono::steady_clock::now();
                if (ggml_graph_compute(l.graph, &plan) != GGML_STATUS_SUCCESS) die("ggml_graph_compute failed");
                const double t =
                    std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
                spent += t * 1e-6;
                if (r > 0 || spent > o.case_seconds) {  // a warm-up already over budget is the one sample
                    us.push_back(t);
                    touched.push_back(hit);
                }
                if (spent > o.case_seconds && !us.empty()) break;
            }
            std::sort(us.begin(), us.end());
            const double med = us.size() % 2 ? us[us.size() / 2] : 0.5 * (us[us.size() / 2 - 1] + us[us.size() / 2]);
            const double gflop = 6.0 * double(T * s.k) * double(s.H) * double(s.I) * 1e-9;
            const double e_touch = std::accumulate(touched.begin(), touched.end(), 0.0) / double(touched.size());
            const double gbytes = per_expert * e_touch * 1e-9;
            if (o.json)
                std::printf(
                    "{\"kind\": \"result\", \"impl\": \"llama.cpp\", \"shape\": \"%s\", \"H\": %lld, \"I\": %lld, "
                    "\"E\": %lld, \"E_model\": %lld, \"k\": %lld, \"T\": %lld, \"backend\": \"mul_mat_id/%s\", "
                    "\"dtype\": \"%s\", \"threads\": %d, \"us\": %.1f, \"min_us\": %.1f, \"reps\": %zu, "
                    "\"e_touched\": %.2f, \"gflop\": %.4f, \"gbytes\": %.4f, \"gflops\": %.2f, \"gbps\": %.3f}\n",
                    name.c_str(), (long long)s.H, (long long)s.I, (long long)E, (long long)s.E, (long long)s.k,
                    (long long)T, o.weights.c_str(), o.weights.c_str(), o.threads, med, us.front(), us.size(), e_touch,
                    gflop, gbytes, gflop / (med * 1e-6), gbytes / (med * 1e-6));
            else
                std::printf("%-18s %5lld %-11s %12.1f %8.1f %7.2f %7.1f  %zu\n",
                            (E == s.E ? name : name + "/E" + std::to_string(E)).c_str(), (long long)T, "mul_mat_id",
                            med, gflop / (med * 1e-6), gbytes / (med * 1e-6), e_touch, us.size());
            std::fflush(stdout);
            for (auto& l : layers) ggml_free(l.ctx);
        }
        for (auto& w : ws) ggml_free(w.ctx);
    }
    ggml_threadpool_free(pool);
    return 0;
}
