// dump_test_util.h: helpers of the tests of src/precision/ (dumps, find-nan, compare-dumps).
#ifndef RECSDK_TESTS_PRECISION_DUMP_TEST_UTIL_H_
#define RECSDK_TESTS_PRECISION_DUMP_TEST_UTIL_H_

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "recsdk/recsdk.h"
#include "src/device/kernel.h"

namespace recsdk::testing {

// FreshDir: an empty directory of this test process's own (under RECSDK_TEST_TMPDIR).
inline std::string FreshDir(const std::string& name) {
  const char* d = std::getenv("RECSDK_TEST_TMPDIR");
  const std::string dir = std::string(d != nullptr ? d : "/tmp") + "/recsdk_dump_test_" +
                          std::to_string(static_cast<long>(::getpid())) + "/" + name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

inline std::string ReadText(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// StepDirs: step number -> directory, of every published step under `root`.
inline std::map<int64_t, std::string> StepDirs(const std::string& root) {
  std::map<int64_t, std::string> out;
  for (const auto& e : std::filesystem::recursive_directory_iterator(root)) {
    if (e.is_regular_file() && e.path().filename() == "manifest.json") {
      const std::filesystem::path dir = e.path().parent_path();
      out[std::stoll(dir.filename().string())] = dir.string();
    }
  }
  return out;
}

// BuildLogModel: scope/z = Log(y), y = x * three (a Const of `three`), x fed [2].
inline void BuildLogModel(Graph* g, float three = 3.0f) {
  Scope root(g);
  Output x = ops::Placeholder(root.WithOpName("x"), DType::kFloat32, Shape{2});
  Output y = ops::Mul(root.WithOpName("y"), x, ops::Const(root.WithOpName("three"), three));
  ops::Log(root.WithOpName("scope/z"), y);
}

inline Tensor Floats(std::vector<float> v) {
  const int64_t n = static_cast<int64_t>(v.size());
  return *Tensor::FromValues<float>(Shape{n}, v);
}

inline std::unique_ptr<Session> MakeSession(const Graph& g, const SessionConfig& config) {
  auto s = Session::Create(g, config);
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? std::move(*s) : nullptr;
}

// PerturbedKernel: the CPU kernel it wraps, with the last element of output 0 negated (the planted
// fault a broken device kernel would make). Float32 outputs only.
class PerturbedKernel final : public internal::OpKernel {
 public:
  explicit PerturbedKernel(std::unique_ptr<internal::OpKernel> inner) : inner_(std::move(inner)) {}
  Status Compute(internal::OpKernelContext& ctx) override {
    if (Status s = inner_->Compute(ctx); !s.ok()) return s;
    Tensor* out = ctx.output(0);
    float* v = out->data<float>();
    v[out->num_elements() - 1] = -v[out->num_elements() - 1];
    return absl::OkStatus();
  }

 private:
  std::unique_ptr<internal::OpKernel> inner_;
};

// ScopedPerturbedKernel: while it lives, the float32 CPU kernel of `type` is a PerturbedKernel
// (a test-only registration); the original is registered again when it goes. The CPU kernels must
// be registered already (a Session was created).
class ScopedPerturbedKernel {
 public:
  explicit ScopedPerturbedKernel(std::string type) : type_(std::move(type)) {
    internal::KernelRegistry& registry = internal::KernelRegistry::Global();
    const internal::KernelFactory* found = registry.Find(type_, "cpu", DType::kFloat32, "");
    if (found == nullptr) {
      ADD_FAILURE() << "no float32 " << type_ << " kernel for the CPU";
      return;
    }
    original_ = *found;
    registry.Register(
        type_, "cpu", DType::kFloat32,
        [original = original_](const Node& node) -> StatusOr<std::unique_ptr<internal::OpKernel>> {
          auto inner = original(node);
          if (!inner.ok()) return inner.status();
          return std::make_unique<PerturbedKernel>(*std::move(inner));
        });
  }
  ~ScopedPerturbedKernel() {
    if (original_) {
      internal::KernelRegistry::Global().Register(type_, "cpu", DType::kFloat32, original_);
    }
  }
  ScopedPerturbedKernel(const ScopedPerturbedKernel&) = delete;
  ScopedPerturbedKernel& operator=(const ScopedPerturbedKernel&) = delete;

 private:
  std::string type_;
  internal::KernelFactory original_;
};

// RunTool: `recsdk ARGS` (the installed command line; RECSDK_TOOL is set by tests/CMakeLists.txt):
// its exit status and what it printed.
inline std::pair<int, std::string> RunTool(const std::string& args) {
  const std::string out = FreshDir("tool_output") + "/out.txt";
  const int rc = std::system(
      (std::string(std::getenv("RECSDK_TOOL")) + " " + args + " >" + out + " 2>&1").c_str());
  return {WIFEXITED(rc) ? WEXITSTATUS(rc) : -1, ReadText(out)};
}

}  // namespace recsdk::testing

#endif  // RECSDK_TESTS_PRECISION_DUMP_TEST_UTIL_H_
