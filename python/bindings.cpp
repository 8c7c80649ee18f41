// moex_experts._moex: the Python bindings of moex's public C++ API (nanobind). Tensors arrive as DLPack (zero-copy:
// torch tensors, DLPack capsules, NumPy arrays) and become moex::TensorViews with their strides; the experts call
// runs on the stream the caller names (torch's current stream), with weights in the activation dtype or quantized (FP8
// blocks, MXFP4, NVFP4 and their scales, filled into ExpertsProblem::quant as a problem file fills it); the registry,
// Python-written backends and the model API. moex::Error becomes a Python exception carrying the C++ message.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/unique_ptr.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "moex/backend.h"
#include "moex/backward.h"
#include "moex/error.h"
#include "moex/model.h"
#include "moex/quant.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace moex::python {
namespace {

using Array = nb::ndarray<>;  // any device: view_of accepts the CPU and CUDA ones

// ---- tensors ---------------------------------------------------------------------------------------------------

// What moex calls a DLPack element type; `bytes`: FP4 codes, two per byte, whatever byte type holds them (uint8, int8
// as transformers' FP8Experts stores them, torch's float4_e2m1fn_x2), read as uint8.
DType dtype_of(const nb::dlpack::dtype& d, const char* name, bool bytes) {
    using Code = nb::dlpack::dtype_code;
    if (d.lanes == 1) {
        if (d.code == uint8_t(Code::Bfloat) && d.bits == 16) return DType::kBF16;
        if (d.code == uint8_t(Code::Float) && d.bits == 16) return DType::kF16;
        if (d.code == uint8_t(Code::Float) && d.bits == 32) return DType::kF32;
        if (d.code == uint8_t(Code::Float) && d.bits == 64) return DType::kF64;
        if (d.code == uint8_t(Code::Int) && d.bits == 32) return DType::kI32;
        if (d.code == uint8_t(Code::Int) && d.bits == 64) return DType::kI64;
        if (d.code == uint8_t(Code::UInt) && d.bits == 8) return DType::kU8;
        if (d.code == uint8_t(Code::Float8_E4M3FN) && d.bits == 8) return DType::kFP8E4M3;
        if (d.code == uint8_t(Code::Float8_E8M0FNU) && d.bits == 8) return DType::kUE8M0;
        if (bytes && d.code == uint8_t(Code::Int) && d.bits == 8) return DType::kU8;
    }
    if (bytes && d.code == uint8_t(Code::Float4_E2M1FN) && d.bits * d.lanes == 8) return DType::kU8;
    const std::string type = d.code == uint8_t(Code::Int) && d.bits == 8 && d.lanes == 1
                                 ? "int8 (int8 and float4_e2m1fn_x2 hold FP4 weights of quant mxfp4 | nvfp4)"
                                 : "(DLPack code " + std::to_string(int(d.code)) + ", " + std::to_string(int(d.bits)) +
                                       " bits x " + std::to_string(int(d.lanes)) + ")";
    fail(ErrorCode::kInvalidArgument, std::string(name) + ": unsupported element type " + type);
}

// A DLPack tensor as a moex view (strides in elements; none given = row-major, as DLPack says).
TensorView view_of(const nb::dlpack::dltensor& t, const char* name, bool bytes = false) {
    MOEX_REQUIRE(t.ndim >= 0 && t.ndim <= kMaxDims, ErrorCode::kInvalidArgument,
                 std::string(name) + ": " + std::to_string(t.ndim) + " dimensions; at most " +
                     std::to_string(kMaxDims) + " are supported");
    const int32_t dev = t.device.device_type;
    MOEX_REQUIRE(
        dev == nb::device::cpu::value || dev == nb::device::cuda::value, ErrorCode::kInvalidArgument,
        std::string(name) + ": DLPack device type " + std::to_string(dev) + "; moex takes CPU and CUDA memory");
    TensorView v;
    v.data = static_cast<char*>(t.data) + t.byte_offset;
    v.dtype = dtype_of(t.dtype, name, bytes);
    v.device = dev == nb::device::cuda::value ? Device::kCUDA : Device::kCPU;
    v.device_index = int(t.device.device_id);
    v.ndim = int(t.ndim);
    int64_t row_major = 1;
    for (int d = v.ndim - 1; d >= 0; --d) {
        v.shape[d] = t.shape[d];
        v.strides[d] = t.strides ? t.strides[d] : row_major;
        row_major *= t.shape[d];
    }
    return v;
}

TensorView view_of(const Array& a, const char* name, bool bytes = false) {
    MOEX_REQUIRE(a.ndim() <= size_t(kMaxDims), ErrorCode::kInvalidArgument,
                 std::string(name) + ": " + std::to_string(a.ndim()) + " dimensions; at most " +
                     std::to_string(kMaxDims) + " are supported");
    nb::dlpack::dltensor t;
    int64_t shape[kMaxDims], strides[kMaxDims];
    t.data = const_cast<void*>(a.data());
    t.device = {a.device_type(), a.device_id()};
    t.ndim = int32_t(a.ndim());
    t.dtype = a.dtype();
    for (size_t d = 0; d < a.ndim(); ++d) shape[d] = int64_t(a.shape(d)), strides[d] = int64_t(a.stride(d));
    t.shape = shape;
    t.strides = strides;
    return view_of(t, name, bytes);
}

// moex's element type as DLPack names it.
nb::dlpack::dtype dl_dtype(DType t) {
    nb::dlpack::dtype dt{};
    dt.lanes = 1;
    dt.bits = uint8_t(dtype_size(t) * 8);
    using Code = nb::dlpack::dtype_code;
    switch (t) {
        case DType::kBF16: dt.code = uint8_t(Code::Bfloat); break;
        case DType::kF16:
        case DType::kF32:
        case DType::kF64: dt.code = uint8_t(Code::Float); break;
        case DType::kI32:
        case DType::kI64: dt.code = uint8_t(Code::Int); break;
        case DType::kFP8E4M3: dt.code = uint8_t(Code::Float8_E4M3FN); break;
        case DType::kUE8M0: dt.code = uint8_t(Code::Float8_E8M0FNU); break;
        case DType::kU8: dt.code = uint8_t(Code::UInt); break;
    }
    return dt;
}

int32_t dl_device(Device d) { return d == Device::kCUDA ? nb::device::cuda::value : nb::device::cpu::value; }

// A view handed to a Python backend, as a torch tensor when torch is there (else a NumPy-style DLPack array).
nb::object to_python(const TensorView& v) {
    if (!v.defined()) return nb::none();
    const nb::dlpack::dtype dt = dl_dtype(v.dtype);
    size_t shape[kMaxDims];
    int64_t strides[kMaxDims];
    for (int d = 0; d < v.ndim; ++d) shape[d] = size_t(v.shape[d]), strides[d] = v.strides[d];
    nb::ndarray<nb::pytorch> a(v.data, size_t(v.ndim), shape, nb::handle(), strides, dt, dl_device(v.device),
                               v.device_index);
    return nb::cast(a, nb::rv_policy::reference);  // a view of moex's memory, never a copy
}

// ---- the experts call ------------------------------------------------------------------------------------------

struct Layout {
    bool has_gate = true, is_transposed = false, is_concatenated = true;
    std::string activation = "silu", gate = "default";
    float swiglu_alpha = 1.702f, swiglu_limit = 7.0f;
};

// Quantized weights (moex/quant.h) as the call takes them: the format's name, the fp8 block (0 x 0: per-tensor) and
// the activation scheme ("" = the format's default: dynamic for fp8, none for FP4); the companions are arguments.
struct Quant {
    std::string format = "none";
    int64_t block_n = 128, block_k = 128;
    std::string activation_scheme;
};

// The call's tensor arguments, in the order view(i, name, bytes) takes them.
enum Arg : int {
    kX,
    kIds,
    kWeights,
    kUp,
    kDown,
    kUpBias,
    kDownBias,
    kUpScale,
    kDownScale,
    kUpGlobal,
    kDownGlobal,
    kUpActScale,
    kDownActScale,
    kArgs
};

// ExpertsProblem (with ExpertsProblem::quant as a problem file fills it, src/io/problem_file.cpp) from the call's
// arguments; view(arg, name, bytes) gives argument `arg` as a view (undefined when it is None). Shapes, dtypes and
// the presence of the companions are left to ExpertsProblem::validate, whose messages name them.
template <class View>
ExpertsProblem problem_of(View&& view, const Layout& l, const Quant& q) {
    ExpertsProblem p;
    const char* up = l.has_gate ? "gate_up_proj" : "up_proj";
    static const char* const kCompanions[2][kArgs - kUpScale] = {
        {"up_proj_scale_inv", "down_proj_scale_inv", "up_proj_global_scale", "down_proj_global_scale",
         "up_proj_activation_scale", "down_proj_activation_scale"},
        {"gate_up_proj_scale_inv", "down_proj_scale_inv", "gate_up_proj_global_scale", "down_proj_global_scale",
         "gate_up_proj_activation_scale", "down_proj_activation_scale"}};
    const char* const* companion = kCompanions[l.has_gate ? 1 : 0];
    const auto format = quant_format_from_name(q.format);
    MOEX_REQUIRE(format.has_value(), ErrorCode::kInvalidArgument,
                 "unknown quant `" + q.format + "`; valid: none, fp8 (fp8_block), mxfp4, nvfp4");
    if (*format == QuantFormat::kNone) {
        for (int a = kUpScale; a < kArgs; ++a)
            MOEX_REQUIRE(!view(a, companion[a - kUpScale], false).defined(), ErrorCode::kInvalidArgument,
                         std::string(companion[a - kUpScale]) +
                             " is given but quant is none (the weights are in the activation dtype)");
        MOEX_REQUIRE(q.activation_scheme.empty() || q.activation_scheme == "none", ErrorCode::kInvalidArgument,
                     "activation_scheme " + q.activation_scheme + " is given but quant is none");
    } else {
        ExpertsQuant& e = p.quant;
        e.format = *format;
        e.block_n = q.block_n, e.block_k = q.block_k;
        const std::string scheme = !q.activation_scheme.empty()   ? q.activation_scheme
                                   : *format == QuantFormat::kFp8 ? "dynamic"
                                                                  : "none";
        const auto act = activation_quant_from_name(scheme);
        MOEX_REQUIRE(act.has_value(), ErrorCode::kInvalidArgument,
                     "unknown activation_scheme `" + scheme + "`; valid: none, dynamic, static");
        e.activations = *act;
        TensorView* slots[] = {&e.gate_up.scale_inv, &e.down.scale_inv,           &e.gate_up.global_scale,
                               &e.down.global_scale, &e.gate_up.activation_scale, &e.down.activation_scale};
        for (int a = kUpScale; a < kArgs; ++a) *slots[a - kUpScale] = view(a, companion[a - kUpScale], false);
    }
    const bool fp4 = p.quant.fp4();
    p.hidden_states = view(kX, "hidden_states", false);
    p.top_k_index = view(kIds, "top_k_index", false);
    p.top_k_weights = view(kWeights, "top_k_weights", false);
    p.gate_up_proj = view(kUp, up, fp4);
    p.down_proj = view(kDown, "down_proj", fp4);
    p.gate_up_bias = view(kUpBias, l.has_gate ? "gate_up_proj_bias" : "up_proj_bias", false);
    p.down_bias = view(kDownBias, "down_proj_bias", false);
    p.has_gate = l.has_gate;
    p.is_transposed = l.is_transposed;
    p.is_concatenated = l.is_concatenated;
    const auto act = activation_from_name(l.activation);
    MOEX_REQUIRE(act.has_value(), ErrorCode::kInvalidArgument,
                 "unknown activation `" + l.activation + "`; valid: silu, gelu, gelu_pytorch_tanh, relu");
    p.activation = *act;
    const auto gate = gate_kind_from_name(l.gate);
    MOEX_REQUIRE(gate.has_value(), ErrorCode::kInvalidArgument,
                 "unknown gate `" + l.gate + "`; valid: default, gpt_oss");
    p.gate = *gate;
    p.swiglu_alpha = l.swiglu_alpha;
    p.swiglu_limit = l.swiglu_limit;
    return p;
}

// The "moex" choice for one call: the decode kernel while few rows reach each expert, grouped GEMMs after
// (bench/RESULTS.md D: batched_mm leads at T <= 8 on every shape on the H200, grouped_mm from T = 64).
std::string auto_backend(const ExpertsProblem& p) {
    const int64_t rows = p.T() * p.k();
    if (p.device() == Device::kCUDA) return rows <= 16 * p.k() ? "batched_mm" : "grouped_mm";
    return rows <= 8 * p.k() ? "batched_mm" : "grouped_mm";
}

void run_backend(const std::string& backend, const ExpertsProblem& p, const TensorView& out, uintptr_t stream,
                 int num_threads, const ExpertsSaved* saved = nullptr) {
    RunOptions options;
    options.num_threads = num_threads;
    options.cuda_stream = reinterpret_cast<void*>(stream);
    options.saved = saved;
    const std::string name = backend == "auto" ? auto_backend(p) : backend;
    const Backend& b = ExpertsInterface::global().get(name);
    nb::gil_scoped_release release;  // CPU calls take long; a Python backend takes the GIL back itself
    b.run(p, out, options);
}

// The call on DLPack arrays (capsules, NumPy, anything nanobind imports), into `out`.
void experts(const std::string& backend, const Array& x, const Array& ids, const Array& weights, const Array& gate_up,
             const Array& down, const std::optional<Array>& gate_up_bias, const std::optional<Array>& down_bias,
             const Array& out, bool has_gate, bool is_transposed, bool is_concatenated, const std::string& activation,
             const std::string& gate, float swiglu_alpha, float swiglu_limit, uintptr_t stream, int num_threads,
             const std::string& quant, int64_t block_n, int64_t block_k, const std::string& activation_scheme,
             const std::optional<Array>& up_scale_inv, const std::optional<Array>& down_scale_inv,
             const std::optional<Array>& up_global_scale, const std::optional<Array>& down_global_scale,
             const std::optional<Array>& up_activation_scale, const std::optional<Array>& down_activation_scale) {
    const Layout layout{has_gate, is_transposed, is_concatenated, activation, gate, swiglu_alpha, swiglu_limit};
    const Array* required[] = {&x, &ids, &weights, &gate_up, &down};
    const std::optional<Array>* optional[] = {
        &gate_up_bias,    &down_bias,         &up_scale_inv,        &down_scale_inv,
        &up_global_scale, &down_global_scale, &up_activation_scale, &down_activation_scale};
    auto view = [&](int a, const char* name, bool bytes) {
        if (a < kUpBias) return view_of(*required[a], name, bytes);
        const std::optional<Array>& o = *optional[a - kUpBias];
        return o ? view_of(*o, name, bytes) : TensorView{};
    };
    const ExpertsProblem p = problem_of(view, layout, Quant{quant, block_n, block_k, activation_scheme});
    run_backend(backend, p, view_of(out, "out"), stream, num_threads);
}

// The problem of a call with weights in the activation dtype (the backward's and the training forward's).
ExpertsProblem plain_problem_of(const Array& x, const Array& ids, const Array& weights, const Array& gate_up,
                                const Array& down, const std::optional<Array>& gate_up_bias,
                                const std::optional<Array>& down_bias, const Layout& layout) {
    const Array* required[] = {&x, &ids, &weights, &gate_up, &down};
    auto view = [&](int a, const char* name, bool bytes) {
        if (a < kUpBias) return view_of(*required[a], name, bytes);
        const std::optional<Array>* o = a == kUpBias ? &gate_up_bias : a == kDownBias ? &down_bias : nullptr;
        return o && *o ? view_of(**o, name, bytes) : TensorView{};
    };
    return problem_of(view, layout, Quant{});
}

// The backward of one experts call (moex/backward.h) into the given gradient arrays (None: not computed), through
// backend `backend` ("auto" resolves as the forward does: every CPU backend shares one backward).
void experts_backward_call(const std::string& backend, const Array& x, const Array& ids, const Array& weights,
                           const Array& gate_up, const Array& down, const std::optional<Array>& gate_up_bias,
                           const std::optional<Array>& down_bias, const Array& grad_out,
                           const std::optional<Array>& grad_x, const std::optional<Array>& grad_weights,
                           const std::optional<Array>& grad_gate_up, const std::optional<Array>& grad_down,
                           const std::optional<Array>& grad_gate_up_bias, const std::optional<Array>& grad_down_bias,
                           bool has_gate, bool is_transposed, bool is_concatenated, const std::string& activation,
                           const std::string& gate, float swiglu_alpha, float swiglu_limit, int num_threads,
                           uintptr_t stream, const std::optional<Array>& saved_gate_up,
                           const std::optional<Array>& saved_slot_row) {
    const ExpertsProblem p =
        plain_problem_of(x, ids, weights, gate_up, down, gate_up_bias, down_bias,
                         {has_gate, is_transposed, is_concatenated, activation, gate, swiglu_alpha, swiglu_limit});
    auto grad = [](const std::optional<Array>& a, const char* name) { return a ? view_of(*a, name) : TensorView{}; };
    const ExpertsGrads grads{grad(grad_x, "grad hidden_states"),
                             grad(grad_weights, "grad top_k_weights"),
                             grad(grad_gate_up, "grad gate_up_proj"),
                             grad(grad_down, "grad down_proj"),
                             grad(grad_gate_up_bias, "grad gate_up_proj_bias"),
                             grad(grad_down_bias, "grad down_proj_bias")};
    const TensorView go = view_of(grad_out, "grad_out");
    RunOptions options;
    options.num_threads = num_threads;
    options.cuda_stream = reinterpret_cast<void*>(stream);  // CUDA: the caller's stream (0 = the default stream)
    // One given without the other reaches validate_saved, which names the missing view.
    const auto maybe = [](const std::optional<Array>& a, const char* name) {
        return a ? view_of(*a, name) : TensorView{};
    };
    const ExpertsSaved saved{maybe(saved_gate_up, "saved_gate_up"), maybe(saved_slot_row, "saved_slot_row")};
    options.saved = saved_gate_up || saved_slot_row ? &saved : nullptr;
    const std::string name = backend == "auto" ? auto_backend(p) : backend;
    const Backend& b = ExpertsInterface::global().get(name);
    nb::gil_scoped_release release;
    b.backward(p, go, grads, options);
}

// experts() that also keeps what the backward reads (moex/backward.h ExpertsSaved) in saved_gate_up (T*k, N) and
// saved_slot_row (T*k,) int32: the training forward of backends whose saves_for_backward() is None.
void experts_saving(const std::string& backend, const Array& x, const Array& ids, const Array& weights,
                    const Array& gate_up, const Array& down, const std::optional<Array>& gate_up_bias,
                    const std::optional<Array>& down_bias, const Array& out, const Array& saved_gate_up,
                    const Array& saved_slot_row, bool has_gate, bool is_transposed, bool is_concatenated,
                    const std::string& activation, const std::string& gate, float swiglu_alpha, float swiglu_limit,
                    uintptr_t stream) {
    const ExpertsProblem p =
        plain_problem_of(x, ids, weights, gate_up, down, gate_up_bias, down_bias,
                         {has_gate, is_transposed, is_concatenated, activation, gate, swiglu_alpha, swiglu_limit});
    const ExpertsSaved saved{view_of(saved_gate_up, "saved_gate_up"), view_of(saved_slot_row, "saved_slot_row")};
    run_backend(backend, p, view_of(out, "out"), stream, 0, &saved);
}

// Why `backend`'s forward of a call of this shape on CUDA device `device_index` keeps nothing for its backward (None:
// it keeps ExpertsSaved). Shapes, dtypes and flags only, never tensor memory (the views point nowhere), so
// torch.compile asks it with fake tensors.
std::optional<std::string> saves_for_backward(const std::string& backend, int64_t T, int64_t H, int64_t I, int64_t E,
                                              int64_t k, const std::string& dtype, const std::string& weights_dtype,
                                              bool ids_i64, bool has_gate_up_bias, bool has_down_bias, bool has_gate,
                                              bool is_transposed, bool is_concatenated, const std::string& activation,
                                              const std::string& gate, float swiglu_alpha, float swiglu_limit,
                                              int device_index) {
    const Layout layout{has_gate, is_transposed, is_concatenated, activation, gate, swiglu_alpha, swiglu_limit};
    const auto dt = dtype_from_name(dtype), wdt = dtype_from_name(weights_dtype);
    MOEX_REQUIRE(dt && wdt, ErrorCode::kInvalidArgument, "unknown dtype " + dtype + " / " + weights_dtype);
    const int64_t N = has_gate ? 2 * I : I;
    void* const nowhere = reinterpret_cast<void*>(uintptr_t(256));  // aligned, never read
    auto view = [&](int a, const char*, bool) {
        const auto at = [&](DType d, std::initializer_list<int64_t> shape) {
            return TensorView::contiguous(nowhere, d, shape, Device::kCUDA, device_index);
        };
        switch (a) {
            case kX: return at(*dt, {T, H});
            case kIds: return at(ids_i64 ? DType::kI64 : DType::kI32, {T, k});
            case kWeights: return at(*wdt, {T, k});
            case kUp: return is_transposed ? at(*dt, {E, H, N}) : at(*dt, {E, N, H});
            case kDown: return is_transposed ? at(*dt, {E, I, H}) : at(*dt, {E, H, I});
            case kUpBias: return has_gate_up_bias ? at(*dt, {E, N}) : TensorView{};
            case kDownBias: return has_down_bias ? at(*dt, {E, H}) : TensorView{};
            default: return TensorView{};
        }
    };
    const ExpertsProblem p = problem_of(view, layout, Quant{});
    const std::string name = backend == "auto" ? auto_backend(p) : backend;
    return ExpertsInterface::global().get(name).save_refusal(p);
}

// ---- torch tensors through the DLPack C exchange API -----------------------------------------------------------
// DLPack 1.x's `type(tensor).__dlpack_c_exchange_api__` (torch >= 2.10): a PyCapsule "dlpack_exchange_api" holding
// C entry points that describe a tensor object in place (no capsule per tensor), allocate a tensor of the framework
// and name its current stream. The layout below is DLPack's ABI (dlpack.h, DLPackExchangeAPI, major version 1).

struct DLPackVersion {
    uint32_t major, minor;
};
struct ManagedTensorVersioned {
    DLPackVersion version;
    void* manager_ctx;
    void (*deleter)(ManagedTensorVersioned*);
    uint64_t flags;
    nb::dlpack::dltensor dl_tensor;
};
using SetError = void (*)(void* ctx, const char* kind, const char* message);
struct ExchangeApi {
    DLPackVersion version;
    const void* prev_api;
    int (*allocate)(nb::dlpack::dltensor* prototype, ManagedTensorVersioned** out, void* error_ctx, SetError set_error);
    int (*managed_from_object)(void* object, ManagedTensorVersioned** out);
    int (*managed_to_object)(ManagedTensorVersioned* tensor, void** object);
    int (*dltensor_from_object)(void* object, nb::dlpack::dltensor* out);
    int (*current_work_stream)(int32_t device_type, int32_t device_id, void** stream);
};

// The exchange API of `object`'s type, or nullptr (looked up once per type: a tensor and a Parameter are two).
const ExchangeApi* exchange_api(nb::handle object) {
    static std::vector<std::pair<PyTypeObject*, const ExchangeApi*>> seen;
    PyTypeObject* type = Py_TYPE(object.ptr());
    for (const auto& [t, api] : seen)
        if (t == type) return api;
    const ExchangeApi* api = nullptr;
    PyObject* capsule = PyObject_GetAttrString(reinterpret_cast<PyObject*>(type), "__dlpack_c_exchange_api__");
    if (capsule == nullptr) {
        PyErr_Clear();
    } else {
        api = static_cast<const ExchangeApi*>(PyCapsule_GetPointer(capsule, "dlpack_exchange_api"));
        if (api == nullptr) PyErr_Clear();
        Py_DECREF(capsule);
        if (api && (api->version.major != 1 || !api->dltensor_from_object || !api->allocate ||
                    !api->managed_to_object || !api->current_work_stream))
            api = nullptr;
    }
    seen.emplace_back(type, api);
    return api;
}

TensorView torch_view(nb::handle object, const char* name, bool bytes) {
    if (object.is_none()) return TensorView{};
    const ExchangeApi* api = exchange_api(object);
    MOEX_REQUIRE(api != nullptr, ErrorCode::kInvalidArgument,
                 std::string(name) + ": " + Py_TYPE(object.ptr())->tp_name +
                     " has no DLPack C exchange API (__dlpack_c_exchange_api__); pass torch tensors");
    nb::dlpack::dltensor t;
    if (api->dltensor_from_object(object.ptr(), &t) != 0) throw nb::python_error();
    return view_of(t, name, bytes);
}

void set_allocation_error(void* ctx, const char* kind, const char* message) {
    *static_cast<std::string*>(ctx) = std::string(kind) + ": " + message;
}

// The call on torch tensors (or any type with the exchange API): the output (T, H) in the dtype of hidden_states is
// allocated by the framework and returned; CUDA work goes on its current stream.
nb::object experts_tensors(const std::string& backend, nb::handle x, nb::handle ids, nb::handle weights,
                           nb::handle gate_up, nb::handle down, nb::handle gate_up_bias, nb::handle down_bias,
                           bool has_gate, bool is_transposed, bool is_concatenated, const std::string& activation,
                           const std::string& gate, float swiglu_alpha, float swiglu_limit, int num_threads,
                           const std::string& quant, int64_t block_n, int64_t block_k,
                           const std::string& activation_scheme, nb::handle up_scale_inv, nb::handle down_scale_inv,
                           nb::handle up_global_scale, nb::handle down_global_scale, nb::handle up_activation_scale,
                           nb::handle down_activation_scale) {
    const Layout layout{has_gate, is_transposed, is_concatenated, activation, gate, swiglu_alpha, swiglu_limit};
    const nb::handle args[kArgs] = {x,
                                    ids,
                                    weights,
                                    gate_up,
                                    down,
                                    gate_up_bias,
                                    down_bias,
                                    up_scale_inv,
                                    down_scale_inv,
                                    up_global_scale,
                                    down_global_scale,
                                    up_activation_scale,
                                    down_activation_scale};
    for (int a = kX; a < kUpBias; ++a)
        MOEX_REQUIRE(!args[a].is_none(), ErrorCode::kInvalidArgument,
                     "experts_tensors: argument " + std::to_string(a) + " is None");
    auto view = [&](int a, const char* name, bool bytes) { return torch_view(args[a], name, bytes); };
    const ExpertsProblem p = problem_of(view, layout, Quant{quant, block_n, block_k, activation_scheme});

    // The output: (T, H) like hidden_states ((0, 0) for an x moex refuses by name before it looks at out).
    const TensorView& hs = p.hidden_states;
    const ExchangeApi* api = exchange_api(x);
    int64_t shape[2] = {hs.ndim == 2 ? hs.shape[0] : 0, hs.ndim == 2 ? hs.shape[1] : 0};
    nb::dlpack::dltensor prototype;
    prototype.device = {dl_device(hs.device), int32_t(hs.device_index)};
    prototype.dtype = dl_dtype(hs.dtype);
    prototype.ndim = 2;
    prototype.shape = shape;
    ManagedTensorVersioned* managed = nullptr;
    std::string error;
    if (api->allocate(&prototype, &managed, &error, set_allocation_error) != 0 || managed == nullptr)
        fail(ErrorCode::kInvalidArgument, "could not allocate the output: " + error);
    const TensorView out = view_of(managed->dl_tensor, "out");
    void* object = nullptr;
    if (api->managed_to_object(managed, &object) != 0) {  // ownership passed in either case
        throw nb::python_error();
    }
    nb::object result = nb::steal(static_cast<PyObject*>(object));
    if (hs.ndim == 2 && hs.shape[0] == 0) return result;  // T = 0: nothing to compute
    void* stream = nullptr;
    if (hs.device == Device::kCUDA &&
        api->current_work_stream(prototype.device.device_type, prototype.device.device_id, &stream) != 0)
        throw nb::python_error();
    run_backend(backend, p, out, reinterpret_cast<uintptr_t>(stream), num_threads);
    return result;
}

// ---- the registry ----------------------------------------------------------------------------------------------

nb::dict backend_info(const Backend& b) {
    nb::dict d;
    d["name"] = std::string(b.name());
    d["description"] = std::string(b.description());
    std::vector<std::string> devices, dtypes;
    for (Device dev : b.devices()) devices.emplace_back(device_name(dev));
    for (DType t : b.dtypes()) dtypes.emplace_back(dtype_name(t));
    d["devices"] = devices;
    d["dtypes"] = dtypes;
    nb::dict why;
    for (Device dev : {Device::kCPU, Device::kCUDA}) {
        const auto reason = b.unavailable(dev);
        why[device_name(dev).data()] = reason ? nb::cast(*reason) : nb::none();
    }
    d["unavailable"] = why;
    nb::dict formats;  // what it takes besides weights in the activation dtype, per device
    for (Device dev : {Device::kCPU, Device::kCUDA}) {
        std::vector<std::string> names;
        for (QuantFormat f : b.quant_formats(dev)) names.emplace_back(quant_format_name(f));
        formats[device_name(dev).data()] = names;
    }
    d["quant_formats"] = formats;
    d["cuda_host_synchronizes"] = b.host_synchronizes(Device::kCUDA);
    d["load_time_only"] = b.load_time_only();
    nb::dict backward;  // whether backward() computes gradients, per device
    for (Device dev : {Device::kCPU, Device::kCUDA}) backward[device_name(dev).data()] = b.has_backward(dev);
    d["has_backward"] = backward;
    return d;
}

// A backend written in Python: fn(hidden_states, top_k_index, top_k_weights, gate_up_proj, down_proj, gate_up_bias,
// down_bias, out, layout: dict, stream: int) writes out; why_not(device: str) -> str | None says where it cannot run.
// One that lists quant formats is also handed quantized problems: layout then carries "quant" (the format's name),
// "block_n", "block_k", "activation_scheme" and the companions ("gate_up_scale_inv", "down_scale_inv",
// "gate_up_global_scale", ... as tensors or None); "quant" is "none" otherwise.
class PythonBackend final : public Backend {
   public:
    PythonBackend(std::string name, std::string description, std::vector<Device> devices,
                  std::vector<QuantFormat> quant_formats, nb::object fn)
        : name_(std::move(name)),
          description_(std::move(description)),
          devices_(std::move(devices)),
          quant_formats_(std::move(quant_formats)),
          fn_(std::move(fn)) {}
    ~PythonBackend() override {
        nb::gil_scoped_acquire gil;
        fn_.reset();
    }
    std::string_view name() const override { return name_; }
    std::string_view description() const override { return description_; }
    std::vector<Device> devices() const override { return devices_; }
    std::vector<QuantFormat> quant_formats(Device) const override { return quant_formats_; }
    bool host_synchronizes(Device) const override { return true; }  // unknown: say so
    void run(const ExpertsProblem& p, const TensorView& out, const RunOptions& options) const override {
        check_runnable(p, out);
        nb::gil_scoped_acquire gil;
        nb::dict layout;
        layout["has_gate"] = p.has_gate;
        layout["is_transposed"] = p.is_transposed;
        layout["is_concatenated"] = p.is_concatenated;
        layout["activation"] = std::string(activation_name(p.activation));
        layout["gate"] = std::string(gate_kind_name(p.gate));
        layout["swiglu_alpha"] = p.swiglu_alpha;
        layout["swiglu_limit"] = p.swiglu_limit;
        const ExpertsQuant& q = p.quant;
        layout["quant"] = std::string(quant_format_name(q.format));
        if (q.enabled()) {
            layout["block_n"] = q.block_n;
            layout["block_k"] = q.block_k;
            layout["activation_scheme"] = std::string(activation_quant_name(q.activations));
            layout["gate_up_scale_inv"] = to_python(q.gate_up.scale_inv);
            layout["down_scale_inv"] = to_python(q.down.scale_inv);
            layout["gate_up_global_scale"] = to_python(q.gate_up.global_scale);
            layout["down_global_scale"] = to_python(q.down.global_scale);
            layout["gate_up_activation_scale"] = to_python(q.gate_up.activation_scale);
            layout["down_activation_scale"] = to_python(q.down.activation_scale);
        }
        fn_(to_python(p.hidden_states), to_python(p.top_k_index), to_python(p.top_k_weights), to_python(p.gate_up_proj),
            to_python(p.down_proj), to_python(p.gate_up_bias), to_python(p.down_bias), to_python(out), layout,
            reinterpret_cast<uintptr_t>(options.cuda_stream));
    }

   private:
    std::string name_, description_;
    std::vector<Device> devices_;
    std::vector<QuantFormat> quant_formats_;
    nb::object fn_;
};

void register_python_backend(const std::string& name, nb::object fn, const std::vector<std::string>& devices,
                             const std::string& description, const std::vector<std::string>& quant_formats) {
    MOEX_REQUIRE(!name.empty(), ErrorCode::kInvalidArgument, "register_backend: empty name");
    MOEX_REQUIRE(nb::hasattr(fn, "__call__"), ErrorCode::kInvalidArgument, "register_backend: fn is not callable");
    std::vector<Device> devs;
    for (const std::string& d : devices) {
        const auto dev = device_from_name(d);
        MOEX_REQUIRE(dev.has_value(), ErrorCode::kInvalidArgument,
                     "register_backend: unknown device `" + d + "`; valid: cpu, cuda");
        devs.push_back(*dev);
    }
    MOEX_REQUIRE(!devs.empty(), ErrorCode::kInvalidArgument, "register_backend: no devices");
    std::vector<QuantFormat> formats;
    for (const std::string& f : quant_formats) {
        const auto format = quant_format_from_name(f);
        MOEX_REQUIRE(format.has_value() && *format != QuantFormat::kNone, ErrorCode::kInvalidArgument,
                     "register_backend: unknown quant format `" + f + "`; valid: fp8_block, mxfp4, nvfp4");
        formats.push_back(*format);
    }
    ExpertsInterface::global().register_backend(
        std::make_shared<PythonBackend>(name, description, std::move(devs), std::move(formats), std::move(fn)));
}

// ---- the model ---------------------------------------------------------------------------------------------

ExpertsImplementation implementation_of(const nb::handle& value) {
    if (nb::isinstance<nb::str>(value)) return ExpertsImplementation::name(nb::cast<std::string>(value));
    if (nb::isinstance<nb::dict>(value))
        return ExpertsImplementation::per_config_map(nb::cast<std::map<std::string, std::string>>(value));
    fail(ErrorCode::kInvalidArgument, "experts_implementation must be a backend name or a {sub_config: name} dict");
}

std::unique_ptr<Model> from_pretrained(const std::string& path, const std::string& device, int device_index,
                                       std::optional<std::string> dtype, nb::object experts_implementation,
                                       int num_threads, int64_t max_context, bool progress, bool dequantize,
                                       bool decode_graph) {
    ModelOptions o;
    const auto dev = device_from_name(device);
    MOEX_REQUIRE(dev.has_value(), ErrorCode::kInvalidArgument, "unknown device `" + device + "`; valid: cpu, cuda");
    o.device = *dev;
    o.device_index = device_index;
    if (dtype) {
        const auto dt = dtype_from_name(*dtype);
        MOEX_REQUIRE(dt.has_value(), ErrorCode::kInvalidArgument, "unknown dtype `" + *dtype + "`");
        o.dtype = *dt;
    }
    if (!experts_implementation.is_none()) o.experts_implementation = implementation_of(experts_implementation);
    o.num_threads = num_threads;
    o.max_context = max_context;
    o.progress = progress;
    o.dequantize = dequantize;
    o.decode_graph = decode_graph;
    nb::gil_scoped_release release;
    return std::make_unique<Model>(Model::from_pretrained(path, o));
}

struct Generation {
    std::vector<int32_t> prompt_ids, new_ids;
    std::string text;
    bool stopped_on_eos = false;
    double prefill_seconds = 0, decode_seconds = 0, prefill_tokens_per_second = 0, decode_tokens_per_second = 0;
    int64_t recorded_steps = 0;
};

Generation generate(Model& m, nb::object prompt, int64_t max_new_tokens, double temperature, int64_t top_k,
                    double top_p, uint64_t seed, bool stop_on_eos, nb::object on_token) {
    SamplingOptions s;
    s.max_new_tokens = max_new_tokens, s.temperature = temperature, s.top_k = top_k, s.top_p = top_p, s.seed = seed;
    s.stop_on_eos = stop_on_eos;
    std::function<bool(int32_t, const std::string&)> cb;
    if (!on_token.is_none()) {
        cb = [&on_token](int32_t id, const std::string& piece) {
            nb::gil_scoped_acquire gil;
            const nb::object r = on_token(id, piece);
            return r.is_none() || nb::cast<bool>(r);  // None or True: go on; False: stop
        };
    }
    std::optional<std::string> text;
    std::vector<int32_t> ids;
    if (nb::isinstance<nb::str>(prompt))
        text = nb::cast<std::string>(prompt);
    else
        ids = nb::cast<std::vector<int32_t>>(prompt);
    GenerationResult r;
    {
        nb::gil_scoped_release release;  // on_token takes the GIL back for each token
        r = text ? m.generate(*text, s, cb) : m.generate(ids, s, cb);
    }
    return {r.prompt_ids,
            r.new_ids,
            r.text,
            r.stopped_on_eos,
            r.prefill_seconds,
            r.decode_seconds,
            r.prefill_tokens_per_second(),
            r.decode_tokens_per_second(),
            r.recorded_steps};
}

nb::dict config_of(const Model& m) {
    const ModelConfig& c = m.config();
    nb::dict d;
    d["model_type"] = c.model_type;
    d["architecture"] = std::string(architecture_name(c.arch));
    d["vocab_size"] = c.vocab_size;
    d["hidden_size"] = c.hidden_size;
    d["num_hidden_layers"] = c.num_hidden_layers;
    d["num_attention_heads"] = c.num_attention_heads;
    d["num_key_value_heads"] = c.num_key_value_heads;
    d["head_dim"] = c.head_dim;
    d["num_experts"] = c.num_experts;
    d["num_experts_per_tok"] = c.num_experts_per_tok;
    d["moe_intermediate_size"] = c.moe_intermediate_size;
    d["hidden_act"] = std::string(activation_name(c.hidden_act));
    d["sub_config_keys"] = c.sub_config_keys;
    return d;
}

void translate(const Error& e) {
    switch (e.code()) {
        case ErrorCode::kInvalidArgument:
        case ErrorCode::kFormat: PyErr_SetString(PyExc_ValueError, e.what()); return;
        case ErrorCode::kUnsupported: PyErr_SetString(PyExc_NotImplementedError, e.what()); return;
        case ErrorCode::kNotFound: PyErr_SetString(PyExc_LookupError, e.what()); return;
        case ErrorCode::kOverflow: PyErr_SetString(PyExc_OverflowError, e.what()); return;
        case ErrorCode::kIo: PyErr_SetString(PyExc_OSError, e.what()); return;
        case ErrorCode::kCuda: PyErr_SetString(PyExc_RuntimeError, e.what()); return;
    }
    PyErr_SetString(PyExc_RuntimeError, e.what());
}

}  // namespace
}  // namespace moex::python

NB_MODULE(_moex, m) {
    using namespace moex;
    using namespace moex::python;
    m.doc() = "moex: Mixture-of-Experts experts backends (the C++ library's Python bindings)";
    nb::register_exception_translator([](const std::exception_ptr& p, void*) {
        try {
            std::rethrow_exception(p);
        } catch (const Error& e) {
            translate(e);
        }
    });
    m.attr("with_cuda") = bool(MOEX_WITH_CUDA);

    m.def(
        "experts", &experts, "backend"_a, "hidden_states"_a, "top_k_index"_a, "top_k_weights"_a, "gate_up_proj"_a,
        "down_proj"_a, "gate_up_bias"_a.none(), "down_bias"_a.none(), "out"_a, "has_gate"_a = true,
        "is_transposed"_a = false, "is_concatenated"_a = true, "activation"_a = "silu", "gate"_a = "default",
        "swiglu_alpha"_a = 1.702f, "swiglu_limit"_a = 7.0f, "stream"_a = 0, "num_threads"_a = 0, "quant"_a = "none",
        "block_n"_a = 128, "block_k"_a = 128, "activation_scheme"_a = "", "gate_up_scale_inv"_a.none() = nb::none(),
        "down_scale_inv"_a.none() = nb::none(), "gate_up_global_scale"_a.none() = nb::none(),
        "down_global_scale"_a.none() = nb::none(), "gate_up_activation_scale"_a.none() = nb::none(),
        "down_activation_scale"_a.none() = nb::none(),
        "Runs one experts call into `out` (T, H) with a registered backend, or 'auto' (the decode kernel for few rows "
        "per expert, grouped GEMMs for many). CUDA work is queued on `stream` (a cudaStream_t as int). Quantized "
        "weights (quant fp8 | mxfp4 | nvfp4; moex/quant.h): gate_up_proj / down_proj hold float8_e4m3fn codes (E, N, "
        "K) or FP4 codes two per byte (E, N, K / 2; uint8, int8 or float4_e2m1fn_x2), with their scale_inv "
        "(fp8: float32 | float8_e8m0fnu per block_n x block_k block, 0 x 0 = per-tensor; mxfp4: ue8m0 per 32; nvfp4: "
        "e4m3 per 16 plus a float32 global scale per expert) and, for activation_scheme static, an (E,) float32 "
        "activation scale per projection.");
    m.def("experts_tensors", &experts_tensors, "backend"_a, "hidden_states"_a, "top_k_index"_a, "top_k_weights"_a,
          "gate_up_proj"_a, "down_proj"_a, "gate_up_bias"_a.none(), "down_bias"_a.none(), "has_gate"_a = true,
          "is_transposed"_a = false, "is_concatenated"_a = true, "activation"_a = "silu", "gate"_a = "default",
          "swiglu_alpha"_a = 1.702f, "swiglu_limit"_a = 7.0f, "num_threads"_a = 0, "quant"_a = "none",
          "block_n"_a = 128, "block_k"_a = 128, "activation_scheme"_a = "", "gate_up_scale_inv"_a.none() = nb::none(),
          "down_scale_inv"_a.none() = nb::none(), "gate_up_global_scale"_a.none() = nb::none(),
          "down_global_scale"_a.none() = nb::none(), "gate_up_activation_scale"_a.none() = nb::none(),
          "down_activation_scale"_a.none() = nb::none(),
          "experts() on torch tensors read through DLPack's C exchange API (no capsule per tensor): returns the "
          "output (T, H) in hidden_states' dtype, allocated by torch; CUDA work goes on torch's current stream.");
    m.attr("has_exchange_api") = true;
    m.def("experts_backward", &experts_backward_call, "backend"_a, "hidden_states"_a, "top_k_index"_a,
          "top_k_weights"_a, "gate_up_proj"_a, "down_proj"_a, "gate_up_bias"_a.none(), "down_bias"_a.none(),
          "grad_out"_a, "grad_hidden_states"_a.none(), "grad_top_k_weights"_a.none(), "grad_gate_up_proj"_a.none(),
          "grad_down_proj"_a.none(), "grad_gate_up_bias"_a.none(), "grad_down_bias"_a.none(), "has_gate"_a = true,
          "is_transposed"_a = false, "is_concatenated"_a = true, "activation"_a = "silu", "gate"_a = "default",
          "swiglu_alpha"_a = 1.702f, "swiglu_limit"_a = 7.0f, "num_threads"_a = 0, "stream"_a = 0,
          "saved_gate_up"_a.none() = nb::none(), "saved_slot_row"_a.none() = nb::none(),
          "The backward of one experts call: writes the gradients given (None: not computed) from grad_out (T, H); "
          "each has its input's shape and dtype; CUDA work goes on `stream`. saved_gate_up / saved_slot_row: what "
          "experts_saving kept (the backward then skips the gate/up projection). Backends without a backward on the "
          "tensors' device raise NotImplementedError naming those with one.");
    m.def("experts_saving", &experts_saving, "backend"_a, "hidden_states"_a, "top_k_index"_a, "top_k_weights"_a,
          "gate_up_proj"_a, "down_proj"_a, "gate_up_bias"_a.none(), "down_bias"_a.none(), "out"_a, "saved_gate_up"_a,
          "saved_slot_row"_a, "has_gate"_a = true, "is_transposed"_a = false, "is_concatenated"_a = true,
          "activation"_a = "silu", "gate"_a = "default", "swiglu_alpha"_a = 1.702f, "swiglu_limit"_a = 7.0f,
          "stream"_a = 0,
          "experts() into `out`, keeping for the backward the gate/up pre-activation (T*k, N) in hidden_states' dtype "
          "and each slot's row (T*k,) int32 in the given arrays (where saves_for_backward says the backend can).");
    m.def("saves_for_backward", &saves_for_backward, "backend"_a, "T"_a, "H"_a, "I"_a, "E"_a, "k"_a, "dtype"_a,
          "weights_dtype"_a, "ids_i64"_a, "has_gate_up_bias"_a, "has_down_bias"_a, "has_gate"_a = true,
          "is_transposed"_a = false, "is_concatenated"_a = true, "activation"_a = "silu", "gate"_a = "default",
          "swiglu_alpha"_a = 1.702f, "swiglu_limit"_a = 7.0f, "device_index"_a = 0,
          "None when `backend`'s forward of a CUDA call of this shape keeps its gate/up pre-activation for the "
          "backward (experts_saving), else why not. Reads no tensor memory.");
    m.def(
        "backends",
        [] {
            std::vector<nb::dict> out;
            const auto& registry = ExpertsInterface::global();
            for (const std::string& n : registry.names()) out.push_back(backend_info(registry.get(n)));
            return out;
        },
        "Every registered backend: name, description, devices, dtypes, why it cannot run on cpu / cuda here.");
    m.def(
        "why_not",
        [](const std::string& name, const std::string& device) -> std::optional<std::string> {
            const auto dev = device_from_name(device);
            MOEX_REQUIRE(dev.has_value(), ErrorCode::kInvalidArgument, "unknown device `" + device + "`");
            return ExpertsInterface::global().get(name).unavailable(*dev);
        },
        "name"_a, "device"_a,
        "Why backend `name` cannot run on `device` in this build and on this machine; None: it can.");
    m.def("register_backend", &register_python_backend, "name"_a, "fn"_a, "devices"_a = std::vector<std::string>{"cpu"},
          "description"_a = "a backend written in Python", "quant_formats"_a = std::vector<std::string>{},
          "Registers fn(hidden_states, top_k_index, top_k_weights, gate_up_proj, down_proj, gate_up_bias, down_bias, "
          "out, layout, stream) as a moex backend (it writes `out`); replaces a backend of the same name. With "
          "quant_formats (fp8_block, mxfp4, nvfp4) it is handed quantized problems too, their scales in `layout`.");

    nb::class_<Generation>(m, "GenerationResult")
        .def_ro("prompt_ids", &Generation::prompt_ids)
        .def_ro("new_ids", &Generation::new_ids)
        .def_ro("text", &Generation::text)
        .def_ro("stopped_on_eos", &Generation::stopped_on_eos)
        .def_ro("prefill_seconds", &Generation::prefill_seconds)
        .def_ro("decode_seconds", &Generation::decode_seconds)
        .def_ro("prefill_tokens_per_second", &Generation::prefill_tokens_per_second)
        .def_ro("decode_tokens_per_second", &Generation::decode_tokens_per_second)
        .def_ro("recorded_steps", &Generation::recorded_steps,
                "decode steps replayed from a CUDA graph (Model.from_pretrained(..., decode_graph=True))");

    nb::class_<Model>(m, "Model",
                      "A Hugging Face MoE checkpoint loaded by moex's runtime (qwen2_moe, qwen3_moe, mixtral, "
                      "olmoe).")
        .def_static("from_pretrained", &from_pretrained, "path"_a, "device"_a = "cpu", "device_index"_a = 0,
                    "dtype"_a = nb::none(), "experts_implementation"_a = nb::none(), "num_threads"_a = 0,
                    "max_context"_a = 0, "progress"_a = false, "dequantize"_a = false, "decode_graph"_a = true)
        .def_prop_ro("config", &config_of)
        .def_prop_ro("device", [](const Model& m) { return std::string(device_name(m.device())); })
        .def_prop_ro("dtype", [](const Model& m) { return std::string(dtype_name(m.dtype())); })
        .def(
            "set_experts_implementation",
            [](Model& m, nb::handle value) { m.set_experts_implementation(implementation_of(value)); }, "value"_a)
        .def("get_experts_implementation", &Model::get_experts_implementation)
        .def_prop_ro("experts_backend", [](const Model& m) { return m.experts_backend(); })
        .def(
            "forward",
            [](Model& m, const std::vector<int32_t>& ids) {
                nb::gil_scoped_release release;
                return m.forward(ids);
            },
            "ids"_a, "Appends ids to the KV cache; returns the last position's logits (float32, vocab_size).")
        .def("reset", &Model::reset)
        .def_prop_ro("cache_length", &Model::cache_length)
        .def(
            "encode",
            [](const Model& m, const std::string& text, bool add_special_tokens) {
                MOEX_REQUIRE(m.tokenizer() != nullptr, ErrorCode::kInvalidArgument, "this model has no tokenizer.json");
                return m.tokenizer()->encode(text, add_special_tokens);
            },
            "text"_a, "add_special_tokens"_a = true)
        .def(
            "decode",
            [](const Model& m, const std::vector<int32_t>& ids) {
                MOEX_REQUIRE(m.tokenizer() != nullptr, ErrorCode::kInvalidArgument, "this model has no tokenizer.json");
                return m.tokenizer()->decode(ids);
            },
            "ids"_a)
        .def("generate", &generate, "prompt"_a, "max_new_tokens"_a = 32, "temperature"_a = 0.0, "top_k"_a = 0,
             "top_p"_a = 1.0, "seed"_a = 0, "stop_on_eos"_a = true, "on_token"_a = nb::none(),
             "Prefill, then decode (on CUDA grouped_mm entries run batched_mm while decoding). on_token(id, text) is "
             "called for every new token with its text; returning False stops.");
}
