// Problem files: round trips over the layout variants (random problems from the shared harness), defaults, and
// one test per error: bad metadata values and keys, missing, unexpected or misnamed tensors, validate() errors.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <random>

#include "moex/error.h"
#include "moex/problem_file.h"
#include "tests/test_support.h"

namespace moex {
namespace {

using test::temp_path;

uint64_t fresh_seed() { return std::random_device{}(); }

bool same_bytes(const TensorView& a, const TensorView& b) {
    if (a.defined() != b.defined()) return false;
    if (!a.defined()) return true;
    if (a.dtype != b.dtype || a.ndim != b.ndim || a.nbytes() != b.nbytes()) return false;
    for (int d = 0; d < a.ndim; ++d)
        if (a.shape[d] != b.shape[d]) return false;
    return std::memcmp(a.data, b.data, size_t(a.nbytes())) == 0;
}

// A valid small problem as named tensors (edited by the tests), with the metadata that goes with it.
struct Fixture {
    test::HostProblem host;
    std::vector<NamedTensor> tensors;
    std::map<std::string, std::string> meta;
    explicit Fixture(test::Variant v = {}) : host(3, 8, 4, 4, 2, v, fresh_seed()) {
        const ExpertsProblem& p = host.problem();
        tensors = {{"hidden_states", p.hidden_states},
                   {"top_k_index", p.top_k_index},
                   {"top_k_weights", p.top_k_weights},
                   {"gate_up_proj", p.gate_up_proj},
                   {"down_proj", p.down_proj}};
    }
    void erase(const std::string& name) {
        std::erase_if(tensors, [&](const NamedTensor& t) { return t.name == name; });
    }
    std::string write() const {
        const std::string path = temp_path("p.safetensors");
        write_safetensors(path, tensors, meta);
        return path;
    }
};

// load_problem_file must raise `code` with a message that starts with the path and contains every needle.
void expect_load_error(const Fixture& f, std::initializer_list<std::string> needles,
                       ErrorCode code = ErrorCode::kInvalidArgument) {
    const std::string path = f.write();
    try {
        load_problem_file(path);
        ADD_FAILURE() << "accepted; expected: " << *needles.begin();
    } catch (const Error& e) {
        const std::string m = e.what();
        EXPECT_EQ(e.code(), code) << m;
        EXPECT_EQ(m.rfind(path + ": ", 0), 0u) << m;
        for (const std::string& n : needles) EXPECT_NE(m.find(n), std::string::npos) << m << "\nlacks: " << n;
    }
}

TEST(ProblemFile, RoundTripsEveryLayoutVariant) {
    std::vector<test::Variant> variants(6);
    variants[1] = {.dtype = DType::kBF16, .concatenated = false, .transposed = true, .bias = true, .ids_i64 = true};
    variants[2] = {.dtype = DType::kF16, .has_gate = false, .activation = Activation::kRelu, .weights_f32 = false};
    variants[3] = {.dtype = DType::kBF16, .gate = GateKind::kGptOss, .bias = true};
    variants[4] = {.activation = Activation::kGeluTanh, .transposed = true};
    variants[5] = {.has_gate = false, .activation = Activation::kGelu, .bias = true};
    for (const test::Variant& v : variants) {
        SCOPED_TRACE(v.name());
        const test::HostProblem host(5, 8, 6, 4, 2, v, fresh_seed());
        const ExpertsProblem& p = host.problem();
        Tensor expected(p.dtype(), {p.T(), p.H()});
        std::memcpy(expected.data(), p.hidden_states.data, size_t(expected.nbytes()));
        const std::string path = temp_path(v.name() + ".safetensors");
        save_problem_file(path, p, expected.view());
        const ProblemFile f = load_problem_file(path);
        const ExpertsProblem& q = f.problem;
        EXPECT_EQ(q.has_gate, p.has_gate);
        EXPECT_EQ(q.is_transposed, p.is_transposed);
        EXPECT_EQ(q.is_concatenated, p.is_concatenated);
        EXPECT_EQ(q.activation, p.activation);
        EXPECT_EQ(q.gate, p.gate);
        EXPECT_EQ(q.swiglu_alpha, p.swiglu_alpha);
        EXPECT_EQ(q.swiglu_limit, p.swiglu_limit);
        EXPECT_TRUE(same_bytes(q.hidden_states, p.hidden_states));
        EXPECT_TRUE(same_bytes(q.top_k_index, p.top_k_index));
        EXPECT_TRUE(same_bytes(q.top_k_weights, p.top_k_weights));
        EXPECT_TRUE(same_bytes(q.gate_up_proj, p.gate_up_proj));
        EXPECT_TRUE(same_bytes(q.down_proj, p.down_proj));
        EXPECT_TRUE(same_bytes(q.gate_up_bias, p.gate_up_bias));
        EXPECT_TRUE(same_bytes(q.down_bias, p.down_bias));
        EXPECT_TRUE(same_bytes(f.expected, expected.view()));
        EXPECT_TRUE(f.file.contains(p.has_gate ? "gate_up_proj" : "up_proj"));
    }
}

TEST(ProblemFile, ViewsSurviveAMoveOfTheProblemFile) {
    Fixture fx;
    const std::string path = fx.write();
    std::vector<ProblemFile> files;
    files.push_back(load_problem_file(path));
    files.push_back(load_problem_file(path));  // may reallocate: moves the first
    EXPECT_TRUE(same_bytes(files[0].problem.down_proj, fx.host.problem().down_proj));
    EXPECT_FALSE(files[0].expected.defined());
}

TEST(ProblemFile, MissingMetadataMeansTheDefaults) {
    test::Variant v;
    v.gate = GateKind::kGptOss;  // the tensors are the same; the metadata does not say so
    Fixture fx(v);
    const ProblemFile f = load_problem_file(fx.write());
    EXPECT_EQ(f.problem.activation, Activation::kSilu);
    EXPECT_FALSE(f.problem.is_transposed);
    EXPECT_TRUE(f.problem.is_concatenated);
    EXPECT_TRUE(f.problem.has_gate);
    EXPECT_EQ(f.problem.gate, GateKind::kDefault);
    EXPECT_EQ(f.problem.swiglu_alpha, 1.702f);
    EXPECT_EQ(f.problem.swiglu_limit, 7.0f);
}

TEST(ProblemFile, AcceptsPythonBooleansAndInformationalKeys) {
    Fixture fx;
    fx.meta = {{"is_concatenated", "False"}, {"format", "pt"},        {"description", "x"},
               {"gate", "gpt_oss"},          {"swiglu_alpha", "1.5"}, {"swiglu_limit", "3e0"}};
    const ProblemFile f = load_problem_file(fx.write());
    EXPECT_FALSE(f.problem.is_concatenated);
    EXPECT_EQ(f.problem.swiglu_alpha, 1.5f);
    EXPECT_EQ(f.problem.swiglu_limit, 3.0f);
}

TEST(ProblemFile, BadActivationListsTheAllowedOnes) {
    Fixture fx;
    fx.meta = {{"activation", "swishy"}};
    expect_load_error(fx, {"activation = `swishy`", "silu, gelu, gelu_pytorch_tanh, relu"});
}

TEST(ProblemFile, BadBooleansAreNamed) {
    for (const char* key : {"is_transposed", "is_concatenated", "has_gate"}) {
        for (const char* value : {"yes", "1", "TRUE", ""}) {
            Fixture fx;
            fx.meta = {{key, value}};
            expect_load_error(fx, {std::string(key) + " = `" + value + "`", "allowed: true, false"});
        }
    }
}

TEST(ProblemFile, BadGateIsNamed) {
    Fixture fx;
    fx.meta = {{"gate", "swiglu"}};
    expect_load_error(fx, {"gate = `swiglu`", "allowed: default, gpt_oss"});
}

TEST(ProblemFile, SwigluParametersMustBeFiniteNumbers) {
    for (const char* key : {"swiglu_alpha", "swiglu_limit"}) {
        for (const char* value : {"abc", "inf", "nan", "1.7x", "", " 7", "1e999"}) {
            Fixture fx;
            fx.meta = {{"gate", "gpt_oss"}, {key, value}};
            expect_load_error(fx, {std::string(key) + " = `" + value + "`", "not a finite number"});
        }
    }
    Fixture fx;
    fx.meta = {{"gate", "gpt_oss"}, {"swiglu_limit", "-1"}};
    expect_load_error(fx, {"swiglu_limit"});  // parsed, then refused by validate()
}

TEST(ProblemFile, UnknownMetadataKeyListsTheKnownOnes) {
    Fixture fx;
    fx.meta = {{"activaton", "silu"}};
    expect_load_error(fx, {"unknown metadata key `activaton`", "activation, is_transposed"});
}

TEST(ProblemFile, EachMissingTensorIsNamed) {
    for (const char* name : {"hidden_states", "top_k_index", "top_k_weights", "gate_up_proj", "down_proj"}) {
        Fixture fx;
        fx.erase(name);
        expect_load_error(fx, {"missing tensor `" + std::string(name) + "`"});
    }
}

TEST(ProblemFile, UnexpectedTensorIsNamed) {
    Fixture fx;
    fx.tensors.push_back({"router_logits", fx.host.problem().top_k_weights});
    expect_load_error(fx, {"unexpected tensor `router_logits`", "hidden_states, top_k_index"});
}

TEST(ProblemFile, GatedNameMismatchSuggestsHasGate) {
    Fixture fx;
    fx.tensors[3].name = "up_proj";
    expect_load_error(fx, {"has_gate is true", "`up_proj` instead of `gate_up_proj`", "has_gate=false"});
    fx.tensors[3].name = "gate_up_proj";
    fx.meta = {{"has_gate", "false"}};
    expect_load_error(fx, {"has_gate is false", "has_gate=true"});
}

TEST(ProblemFile, ValidateErrorsCarryThePath) {
    Fixture fx;
    fx.tensors[2].view.shape[1] = 1;  // top_k_weights (T, 1): a contiguous prefix of the real buffer
    fx.tensors[2].view.strides[0] = 1;
    expect_load_error(fx, {"top_k_weights has shape (3, 1), expected (3, 2)"});
    Fixture bias;
    bias.tensors.push_back({"down_proj_bias", bias.host.problem().hidden_states});  // (T, H), not (E, H)
    expect_load_error(bias, {"down_proj_bias"});
}

TEST(ProblemFile, TensorWithoutAMoexDtypeIsRefused) {
    Fixture fx;
    const uint8_t bytes[3 * 8] = {};
    const std::string path = temp_path("i8.safetensors");
    std::vector<SafetensorsEntry> entries;
    for (const NamedTensor& t : fx.tensors)
        if (t.name != "hidden_states") entries.push_back(safetensors_entry(t));
    entries.push_back({"hidden_states", "I8", {3, 8}, bytes});
    write_safetensors(path, entries);
    try {
        load_problem_file(path);
        ADD_FAILURE();
    } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::kUnsupported);
        EXPECT_NE(std::string(e.what()).find("`hidden_states` has dtype I8"), std::string::npos) << e.what();
    }
}

TEST(ProblemFile, SaveRefusesAnInvalidProblemAndOutputFilesRoundTrip) {
    Fixture fx;
    ExpertsProblem broken = fx.host.problem();
    broken.down_proj = TensorView{};
    const std::string path = temp_path("broken.safetensors");
    EXPECT_THROW(save_problem_file(path, broken), Error);
    EXPECT_FALSE(std::filesystem::exists(path));

    const std::string out_path = temp_path("out.safetensors");
    save_output_file(out_path, fx.host.problem().hidden_states, {{"backend", "eager"}});
    const SafetensorsFile out = SafetensorsFile::open(out_path);
    EXPECT_EQ(out.names(), std::vector<std::string>{"out"});
    EXPECT_EQ(out.metadata().at("backend"), "eager");
    EXPECT_TRUE(same_bytes(out.view("out"), fx.host.problem().hidden_states));
}

}  // namespace
}  // namespace moex
