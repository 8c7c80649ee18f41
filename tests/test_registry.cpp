// The ExpertsInterface registry: built-in names and order, unknown names, user registration and replacement,
// device availability reasons ("CUDA only"), host synchronisation flags, and the Backend defaults.
#include <algorithm>

#include "moex/error.h"
#include "tests/test_support.h"

namespace moex::test {
namespace {

const std::vector<std::string> kBuiltins = {"eager",    "batched_mm",       "grouped_mm",
                                            "deepgemm", "deepgemm_megamoe", "sonicmoe"};
const std::vector<std::string> kCudaOnly = {"deepgemm", "deepgemm_megamoe", "sonicmoe"};

// A user backend: the float64 reference behind the Backend contract, on the CPU, float32 and bfloat16 only.
// It validates like the built-ins, so tests that iterate the registry at run time may meet it safely.
class UserBackend final : public Backend {
   public:
    explicit UserBackend(std::string description) : description_(std::move(description)) {}
    std::string_view name() const override { return "test_user_reference"; }
    std::string_view description() const override { return description_; }
    std::vector<Device> devices() const override { return {Device::kCPU}; }
    std::vector<DType> dtypes() const override { return {DType::kF32, DType::kBF16}; }
    void run(const ExpertsProblem& p, const TensorView& out, const RunOptions&) const override {
        check_runnable(p, out);
        const std::vector<double> ref = reference_of(p);
        for (size_t i = 0; i < ref.size(); ++i) store_from_double(out, int64_t(i), ref[i]);
    }

   private:
    std::string description_;
};

ExpertsInterface& registry() { return ExpertsInterface::global(); }

TEST(Registry, BuiltinNamesInOrder) {
    const auto names = registry().names();
    ASSERT_GE(names.size(), kBuiltins.size());
    EXPECT_EQ(std::vector<std::string>(names.begin(), names.begin() + long(kBuiltins.size())), kBuiltins);
    EXPECT_EQ(
        registry().valid_names_text().rfind("eager, batched_mm, grouped_mm, deepgemm, deepgemm_megamoe, sonicmoe", 0),
        0u)
        << registry().valid_names_text();
    for (const std::string& n : names) EXPECT_EQ(registry().get(n).name(), n);
}

TEST(Registry, UnknownNameListsEveryValidName) {
    EXPECT_EQ(registry().find("nope"), nullptr);
    for (const auto& call : {std::function<void()>([] { registry().get("nope"); }), std::function<void()>([] {
                                 const HostProblem hp(2, 8, 4, 2, 1, Variant{}, 1);
                                 Tensor out(DType::kF32, {2, 8});
                                 registry().run("nope", hp.problem(), out.view());
                             })}) {
        try {
            call();
            ADD_FAILURE() << "an unknown backend name was accepted";
        } catch (const Error& e) {
            EXPECT_EQ(e.code(), ErrorCode::kNotFound);
            const std::string msg = e.what();
            EXPECT_NE(msg.find("`nope`"), std::string::npos) << msg;
            for (const std::string& n : registry().names())
                EXPECT_NE(msg.find(n), std::string::npos) << n << ": " << msg;
        }
    }
}

TEST(Registry, UserBackendIsVisibleRunsAndIsReplacedByName) {
    registry().register_backend(std::make_shared<UserBackend>("first"));
    auto names = registry().names();
    const auto at = std::find(names.begin(), names.end(), "test_user_reference");
    ASSERT_NE(at, names.end());
    const size_t count = names.size(), position = size_t(at - names.begin());
    EXPECT_GE(position, kBuiltins.size()) << "a user backend must come after the built-ins";
    EXPECT_NE(registry().valid_names_text().find("test_user_reference"), std::string::npos);

    for (DType d : {DType::kF32, DType::kBF16}) {
        Variant v;
        v.dtype = d, v.bias = true;
        const HostProblem hp(9, 16, 8, 4, 2, v, 13);
        Tensor out(d, {9, 16});
        registry().run("test_user_reference", hp.problem(), out.view());
        EXPECT_TRUE(outputs_close(out.view(), reference_of(hp.problem()))) << dtype_name(d);
    }
    // Backend defaults: devices() and dtypes() drive unavailable() and why_not().
    const Backend& b = registry().get("test_user_reference");
    EXPECT_EQ(b.unavailable(Device::kCPU), std::nullopt);
    ASSERT_TRUE(b.unavailable(Device::kCUDA).has_value());
    EXPECT_NE(b.unavailable(Device::kCUDA)->find("CPU only"), std::string::npos) << *b.unavailable(Device::kCUDA);
    Variant f16;
    f16.dtype = DType::kF16;
    const auto why = b.why_not(HostProblem(2, 8, 4, 2, 1, f16, 1).problem());
    ASSERT_TRUE(why.has_value());
    EXPECT_NE(why->find("float16"), std::string::npos) << *why;

    registry().register_backend(std::make_shared<UserBackend>("second"));
    names = registry().names();
    EXPECT_EQ(names.size(), count) << "re-registering a name must replace, not add";
    EXPECT_EQ(names[position], "test_user_reference") << "a replaced backend keeps its place";
    EXPECT_EQ(registry().get("test_user_reference").description(), "second");
}

TEST(Registry, BadRegistrationsThrow) {
    EXPECT_THROW(registry().register_backend(nullptr), Error);
    class Nameless final : public Backend {
        std::string_view name() const override { return ""; }
        std::string_view description() const override { return "no name"; }
        std::vector<Device> devices() const override { return {Device::kCPU}; }
        void run(const ExpertsProblem&, const TensorView&, const RunOptions&) const override {}
    };
    EXPECT_THROW(registry().register_backend(std::make_shared<Nameless>()), Error);
}

TEST(Registry, CudaOnlyBackendsSayCudaOnlyOnCpu) {
    for (const std::string& n : kCudaOnly) {
        const Backend& b = registry().get(n);
        const auto why = b.unavailable(Device::kCPU);
        ASSERT_TRUE(why.has_value()) << n;
        EXPECT_NE(why->find("CUDA only"), std::string::npos) << n << ": " << *why;
        EXPECT_EQ(b.devices(), std::vector<Device>{Device::kCUDA}) << n;
        const auto not_here = b.why_not(HostProblem(2, 8, 4, 2, 1, Variant{}, 1).problem());
        ASSERT_TRUE(not_here.has_value()) << n;
        EXPECT_NE(not_here->find("CUDA only"), std::string::npos) << n << ": " << *not_here;
    }
}

TEST(Registry, PortableBackendsRunOnCpuInEveryDtype) {
    for (const char* n : {"eager", "batched_mm", "grouped_mm"}) {
        const Backend& b = registry().get(n);
        EXPECT_EQ(b.unavailable(Device::kCPU), std::nullopt) << n;
        const auto devs = b.devices();
        EXPECT_NE(std::find(devs.begin(), devs.end(), Device::kCUDA), devs.end()) << n;
        for (DType d : {DType::kF32, DType::kBF16, DType::kF16}) {
            Variant v;
            v.dtype = d;
            EXPECT_EQ(b.why_not(HostProblem(2, 8, 4, 2, 1, v, 1).problem()), std::nullopt) << n << " " << dtype_name(d);
        }
    }
}

TEST(Registry, CudaUnavailabilityHasAReason) {
    for (const std::string& n : registry().names()) {
        const auto why = registry().get(n).unavailable(Device::kCUDA);
        if (cuda_device_count() == 0) {
            ASSERT_TRUE(why.has_value()) << n << " claims to run on CUDA without a device";
            EXPECT_FALSE(why->empty()) << n;
        }
    }
}

// Only eager may synchronise the host with the device (per-expert loop); the others are graph-capturable.
TEST(Registry, HostSynchronizes) {
    for (const std::string& n : kBuiltins) {
        const Backend& b = registry().get(n);
        EXPECT_EQ(b.host_synchronizes(Device::kCUDA), n == "eager") << n;
        EXPECT_FALSE(b.host_synchronizes(Device::kCPU)) << n;
    }
}

TEST(Registry, BuiltinsDescribeThemselves) {
    for (const std::string& n : kBuiltins) {
        const Backend& b = registry().get(n);
        EXPECT_FALSE(b.description().empty()) << n;
        EXPECT_FALSE(b.devices().empty()) << n;
        ASSERT_FALSE(b.dtypes().empty()) << n;
        for (DType d : b.dtypes()) EXPECT_TRUE(is_float_activation(d)) << n << " lists " << dtype_name(d);
    }
}

}  // namespace
}  // namespace moex::test
