// The shared test harness: random problems, placement on a device, poisoned runs, tolerances, comparison.
#include "tests/test_support.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <sstream>

#include "moex/error.h"
#include "src/cpu/kernels.h"

namespace moex::test {
namespace {

// splitmix64 + Box-Muller: the same numbers with every standard library.
class Rng {
   public:
    explicit Rng(uint64_t seed) : s_(seed * 0x9e3779b97f4a7c15ull + 0x632be59bd9b4e019ull) {}
    uint64_t next() {
        uint64_t z = (s_ += 0x9e3779b97f4a7c15ull);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        return z ^ (z >> 31);
    }
    double uniform() { return double((next() >> 11) + 1) * 0x1.0p-53; }  // (0, 1]
    double normal() {  // Marsaglia's polar method: two normals per log, no trigonometry
        if (has_spare_) return has_spare_ = false, spare_;
        double a, b, r;
        do {
            a = 2.0 * uniform() - 1.0, b = 2.0 * uniform() - 1.0, r = a * a + b * b;
        } while (r >= 1.0 || r == 0.0);
        const double f = std::sqrt(-2.0 * std::log(r) / r);
        has_spare_ = true, spare_ = b * f;
        return a * f;
    }
    int64_t below(int64_t n) { return int64_t(next() % uint64_t(n)); }

   private:
    uint64_t s_;
    bool has_spare_ = false;
    double spare_ = 0.0;
};

void fill_normal(const Tensor& t, double scale, Rng& rng) {
    const TensorView& v = t.view();
    for (int64_t i = 0, n = v.numel(); i < n; ++i) {
        double x;
        do x = round_to(scale * rng.normal(), v.dtype);
        while (x == 0.0);
        store_from_double(v, i, x);
    }
}

Tensor make(DType dtype, std::initializer_list<int64_t> shape) { return Tensor(dtype, shape); }

}  // namespace

std::string Variant::name() const {
    std::string s = dtype == DType::kF32 ? "f32" : dtype == DType::kBF16 ? "bf16" : "f16";
    s += concatenated ? "_stacked" : "_interleaved";
    if (transposed) s += "_transposed";
    if (bias) s += "_bias";
    if (!has_gate)
        s += "_ungated_" + gtest_safe(std::string(activation_name(activation)));
    else if (gate == GateKind::kGptOss)
        s += "_gptoss";
    else
        s += "_" + gtest_safe(std::string(activation_name(activation)));
    s += ids_i64 ? "_i64" : "_i32";
    s += weights_f32 ? "_wf32" : "_wact";
    return s;
}

HostProblem::HostProblem(int64_t T, int64_t H, int64_t I, int64_t E, int64_t k, const Variant& v, uint64_t seed) {
    Rng rng(seed);
    const int64_t N = v.has_gate ? 2 * I : I;
    hidden_ = make(v.dtype, {T, H});
    up_ = v.transposed ? make(v.dtype, {E, H, N}) : make(v.dtype, {E, N, H});
    down_ = v.transposed ? make(v.dtype, {E, I, H}) : make(v.dtype, {E, H, I});
    fill_normal(hidden_, 1.0, rng);
    fill_normal(up_, 1.0 / std::sqrt(double(H)), rng);
    fill_normal(down_, 1.0 / std::sqrt(double(I)), rng);
    if (v.bias) {
        up_bias_ = make(v.dtype, {E, N});
        down_bias_ = make(v.dtype, {E, H});
        fill_normal(up_bias_, 0.5, rng);
        fill_normal(down_bias_, 0.5, rng);
    }
    ids_ = make(v.ids_i64 ? DType::kI64 : DType::kI32, {T, k});
    weights_ = make(v.weights_f32 ? DType::kF32 : v.dtype, {T, k});
    p_.hidden_states = hidden_.view();
    p_.top_k_index = ids_.view();
    p_.top_k_weights = weights_.view();
    p_.gate_up_proj = up_.view();
    p_.down_proj = down_.view();
    if (v.bias) p_.gate_up_bias = up_bias_.view(), p_.down_bias = down_bias_.view();
    p_.has_gate = v.has_gate;
    p_.is_transposed = v.transposed;
    p_.is_concatenated = v.concatenated;
    p_.activation = v.activation;
    p_.gate = v.gate;
    if (v.gate == GateKind::kGptOss) p_.swiglu_limit = 1.0f;
    std::vector<int64_t> perm(size_t(std::max<int64_t>(E, 0)));
    for (int64_t t = 0; t < T; ++t) {
        for (int64_t e = 0; e < E; ++e) perm[size_t(e)] = e;
        for (int64_t j = 0; j < k; ++j) {
            if (E < 1) {
                set_id(t, j, 0);
                continue;
            }
            if (k <= E) {  // partial Fisher-Yates: k distinct experts
                std::swap(perm[size_t(j)], perm[size_t(j + rng.below(E - j))]);
                set_id(t, j, perm[size_t(j)]);
            } else {
                set_id(t, j, rng.below(E));
            }
        }
    }
    fill_normal(weights_, 0.5, rng);
}

void HostProblem::set_id(int64_t t, int64_t j, int64_t id) {
    const int64_t off = t * ids_.view().strides[0] + j;
    if (ids_.view().dtype == DType::kI64)
        static_cast<int64_t*>(ids_.data())[off] = id;
    else
        static_cast<int32_t*>(ids_.data())[off] = int32_t(uint32_t(uint64_t(id)));
}

void HostProblem::set_weight(int64_t t, int64_t j, double w) {
    store_from_double(weights_.view(), t * weights_.view().strides[0] + j, w);
}

void HostProblem::set_hidden(int64_t t, int64_t h, double v) {
    store_from_double(hidden_.view(), t * hidden_.view().strides[0] + h, v);
}

void HostProblem::fill_expert(int64_t e, double v) {
    for (const Tensor* t : {&up_, &down_, &up_bias_, &down_bias_}) {
        if (!t->view().defined()) continue;
        const int64_t per = t->view().strides[0];
        for (int64_t i = 0; i < per; ++i) store_from_double(t->view(), e * per + i, v);
    }
}

void store_from_double(const TensorView& t, int64_t offset, double v) {
    void* d = t.data;
    switch (t.dtype) {
        case DType::kBF16: static_cast<uint16_t*>(d)[offset] = f32_to_bf16(float(v)); return;
        case DType::kF16: static_cast<uint16_t*>(d)[offset] = f32_to_f16(float(v)); return;
        case DType::kF32: static_cast<float*>(d)[offset] = float(v); return;
        case DType::kF64: static_cast<double*>(d)[offset] = v; return;
        case DType::kI32: static_cast<int32_t*>(d)[offset] = int32_t(v); return;
        case DType::kI64: static_cast<int64_t*>(d)[offset] = int64_t(v); return;
        default: fail(ErrorCode::kUnsupported, "store_from_double: unsupported dtype");
    }
}

std::vector<Device> devices_under_test() {
    std::vector<Device> d = {Device::kCPU};
    if (cuda_device_count() > 0) d.push_back(Device::kCUDA);
    return d;
}

PlacedProblem place(const ExpertsProblem& host, Device device) {
    PlacedProblem r;
    r.problem = host;
    ExpertsQuant& q = r.problem.quant;
    const std::initializer_list<TensorView*> views = {
        &r.problem.hidden_states, &r.problem.top_k_index,      &r.problem.top_k_weights, &r.problem.gate_up_proj,
        &r.problem.down_proj,     &r.problem.gate_up_bias,     &r.problem.down_bias,     &q.gate_up.scale_inv,
        &q.gate_up.global_scale,  &q.gate_up.activation_scale, &q.down.scale_inv,        &q.down.global_scale,
        &q.down.activation_scale};
    r.buffers.reserve(views.size());
    for (TensorView* v : views) {
        if (!v->defined()) continue;
        r.buffers.push_back(DeviceTensor::from_host(*v, device));
        *v = r.buffers.back().view();
    }
    return r;
}

Tensor run_backend(const Backend& backend, const PlacedProblem& placed, const RunOptions& options) {
    const ExpertsProblem& p = placed.problem;
    const int64_t shape[2] = {p.T(), p.H()};
    DeviceTensor out(p.dtype(), shape, 2, p.device());
    out.fill_bytes(0xff);
    backend.run(p, out.view(), options);
    device_synchronize(p.device());
    Tensor host(p.dtype(), shape, 2);
    out.copy_to_host(host.view());
    return host;
}

Expected reference_of(const ExpertsProblem& p) {
    Expected e;
    e.out.resize(size_t(p.T() * p.H()));
    ReferenceOptions opt;
    if (p.dtype() == DType::kBF16 || p.dtype() == DType::kF16) opt.round_hidden_to = p.dtype();
    opt.term_magnitude = &e.slack;
    reference_experts(p, e.out.data(), opt);
    const double u = p.dtype() == DType::kBF16 ? 0x1p-8 : p.dtype() == DType::kF16 ? 0x1p-11 : 0.0;
    for (double& s : e.slack) s *= u;
    return e;
}

// The per-dtype tolerances, in one place. atol is a fraction of rms(reference); rtol of |reference|.
// f32: the backends accumulate in float32; measured max error 6e-6 rms (H <= 224), so atol 1e-5 and rtol 1e-4
//   catch a TF32 or 16-bit shortcut (~1e-3).
// bf16 / f16: h is rounded where the reference rounds it (ReferenceOptions), so what is left is the final rounding
//   of out (at most 2^-8 / 2^-11 of |out|: rtol just above) plus rare one-ulp flips of h where float32 and float64
//   fall on either side of a rounding midpoint (measured <= 6e-4 rms). A backend that also rounds each slot's
//   weighted term to 16 bits, as torch does, gets the per-output slack of reference_of (Expected) on top.
Tolerance tolerance_for(DType dtype) {
    switch (dtype) {
        case DType::kF32: return {1e-5, 1e-4};
        case DType::kBF16: return {8e-3, 4e-3};
        case DType::kF16: return {2e-3, 6e-4};
        default: return {0.0, 0.0};
    }
}

// Quantized activations: the reference rounds each GEMM input to e4m3 from its float64 value, a backend from its f32
// one, so an input within ~1e-7 of an e4m3 rounding midpoint can land one e4m3 step (2^-3) away. A few such flips per
// call were measured in f32 at up to 9e-4 rms. 16-bit h first rounds to bf16 / f16 on either side of a midpoint and
// then to e4m3, so its flips are rarer but whole steps: measured on the H200 (CUDA, T = 600-700) 5-25 values in
// 4e4-4e5 at up to 2.3% of rms. Hence the outlier budget: 0.1% of the values, each within 5% of rms. FP8
// quantization error itself is ~3e-2 rms on every value, which a wrong scale or block index would show everywhere.
Tolerance tolerance_for(const ExpertsProblem& p) {
    const Tolerance t = tolerance_for(p.dtype());
    if (!p.quant.enabled() || p.quant.activations == ActivationQuant::kNone) return t;
    return {std::max(t.atol, 2e-3), std::max(t.rtol, 2e-3), 1e-3, 0.05};
}

namespace {

::testing::AssertionResult close_with_slack(const TensorView& got, const std::vector<double>& ref,
                                            const std::vector<double>* slack, const std::vector<char>& rows,
                                            std::optional<Tolerance> tolerance) {
    const int64_t T = got.shape[0], H = got.shape[1];
    if (int64_t(ref.size()) != T * H)
        return ::testing::AssertionFailure() << "reference has " << ref.size() << " values, output " << T * H;
    double ss = 0;
    int64_t n = 0;
    for (int64_t i = 0; i < T * H; ++i)
        if (rows.empty() || rows[size_t(i / H)]) ss += ref[size_t(i)] * ref[size_t(i)], ++n;
    const double rms = n ? std::sqrt(ss / double(n)) : 0.0;
    const Tolerance tol = tolerance.value_or(tolerance_for(got.dtype));
    double max_abs = 0, max_rel = 0;
    int64_t bad = 0, first = -1, outliers = 0;
    for (int64_t i = 0; i < T * H; ++i) {
        if (!rows.empty() && !rows[size_t(i / H)]) continue;
        const double r = ref[size_t(i)], g = load_as_double(got, i), err = std::fabs(g - r);
        const double extra = slack ? (*slack)[size_t(i)] : 0.0;
        const bool ok = std::isfinite(g) && err <= tol.atol * rms + tol.rtol * std::fabs(r) + extra;
        if (std::isfinite(g)) {
            max_abs = std::max(max_abs, err);
            max_rel = std::max(max_rel, err / std::max(std::fabs(r), rms > 0 ? rms : 1.0));
        }
        if (!ok && std::isfinite(g) && err <= tol.outlier_atol * rms) {
            ++outliers;
            continue;
        }
        if (!ok && bad++ == 0) first = i;
    }
    if (bad == 0 && double(outliers) <= tol.outlier_fraction * double(n)) return ::testing::AssertionSuccess();
    std::ostringstream m;
    m.precision(9);
    m << bad << " of " << n << " values out of tolerance (" << dtype_name(got.dtype) << ": atol " << tol.atol
      << " * rms " << rms << ", rtol " << tol.rtol << "); max abs err " << max_abs << ", max rel err " << max_rel
      << "; " << outliers << " outliers within " << tol.outlier_atol << " * rms (budget "
      << tol.outlier_fraction * double(n) << ")";
    if (first >= 0)
        m << "; first bad [t=" << first / H << ", h=" << first % H << "]: got " << load_as_double(got, first)
          << ", want " << ref[size_t(first)];
    return ::testing::AssertionFailure() << m.str();
}

}  // namespace

::testing::AssertionResult outputs_close(const TensorView& got, const std::vector<double>& ref,
                                         const std::vector<char>& rows, std::optional<Tolerance> tolerance) {
    return close_with_slack(got, ref, nullptr, rows, tolerance);
}

::testing::AssertionResult outputs_close(const TensorView& got, const Expected& ref, const std::vector<char>& rows,
                                         std::optional<Tolerance> tolerance) {
    return close_with_slack(got, ref.out, &ref.slack, rows, tolerance);
}

bool bitwise_equal(const Tensor& a, const Tensor& b) {
    return a.nbytes() == b.nbytes() && std::memcmp(a.data(), b.data(), size_t(a.nbytes())) == 0;
}

std::optional<std::string> refusal(const Backend& backend, const PlacedProblem& placed) {
    const Device device = placed.problem.device();
    auto why = backend.why_not(placed.problem);
    const auto devs = backend.devices();
    if (std::find(devs.begin(), devs.end(), device) == devs.end()) {
        EXPECT_TRUE(why.has_value()) << backend.name() << " accepted a problem on a device it does not list";
        if (why && device == Device::kCPU) {
            EXPECT_NE(why->find("CUDA only"), std::string::npos) << backend.name() << ": " << *why;
        }
    }
    if (!why) return std::nullopt;
    EXPECT_FALSE(why->empty()) << backend.name() << " refused with an empty reason";
    bool threw = false;
    try {
        run_backend(backend, placed);
    } catch (const Error& e) {
        threw = true;
        EXPECT_EQ(e.code(), ErrorCode::kUnsupported) << e.what();
    }
    EXPECT_TRUE(threw) << backend.name() << " refused (" << *why << ") but run() did not throw moex::Error";
    return std::string(backend.name()) + " refuses: " + *why;
}

std::vector<BackendOnDevice> backends_on_devices() {
    std::vector<BackendOnDevice> r;
    for (const std::string& name : ExpertsInterface::global().names())
        for (Device d : devices_under_test()) r.push_back({name, d});
    return r;
}

std::string param_name(const BackendOnDevice& bd) {
    return gtest_safe(bd.backend + "_" + std::string(device_name(bd.device)));
}

void PrintTo(const BackendOnDevice& bd, std::ostream* os) { *os << bd.backend << " on " << device_name(bd.device); }

std::string gtest_safe(std::string s) {
    for (char& c : s)
        if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
    return s;
}

std::string temp_path(const std::string& stem) {
    struct Folder {
        std::filesystem::path path =
            std::filesystem::temp_directory_path() / ("moex_test_" + std::to_string(::getpid()));
        Folder() { std::filesystem::create_directories(path); }
        ~Folder() {
            std::error_code ignored;
            std::filesystem::remove_all(path, ignored);
        }
    };
    static Folder folder;
    static std::atomic<int> counter{0};
    return (folder.path / (std::to_string(counter++) + "_" + stem)).string();
}

const char* amx_skip() {
    static const std::string why = cpu::amx_why_not() ? std::string("no AMX here: ") + cpu::amx_why_not() : "";
    return why.empty() ? nullptr : why.c_str();
}

}  // namespace moex::test
