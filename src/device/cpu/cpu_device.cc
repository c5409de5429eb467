// cpu_device.cc: the CPU backend: host memory with the configured limits, a oneTBB arena sized
// by intra_op_parallelism, and the registration of every CPU kernel.
#include <cstring>
#include <mutex>
#include <thread>

#include "oneapi/tbb/task_arena.h"
#include "src/device/cpu/gemm_tuner.h"
#include "src/device/cpu/kernel_util.h"

namespace recsdk::internal {
namespace {

class CpuDataTransfer final : public DataTransfer {
 public:
  Status CopyHostToDevice(const Tensor& host, Tensor* device) override {
    return Copy("CopyHostToDevice", host, device);
  }
  Status CopyDeviceToHost(const Tensor& device, Tensor* host) override {
    return Copy("CopyDeviceToHost", device, host);
  }

 private:
  static Status Copy(const char* what, const Tensor& src, Tensor* dst) {
    // Equal byte counts are not enough: a float32 [2,3] copied into an int32 [6] would be
    // reinterpreted silently.
    if (dst == nullptr || src.dtype() != dst->dtype() || src.shape() != dst->shape()) {
      return absl::InvalidArgumentError(fmt::format(
          "cpu {}: source {} {} and destination {} differ; allocate the destination with the "
          "source's dtype and shape",
          what, DTypeName(src.dtype()), src.shape().ToString(),
          dst == nullptr ? std::string("(null)")
                         : fmt::format("{} {}", DTypeName(dst->dtype()), dst->shape().ToString())));
    }
    if (src.TotalBytes() > 0) std::memcpy(dst->raw_data(), src.raw_data(), src.TotalBytes());
    return absl::OkStatus();
  }
};

class CpuDevice final : public Device {
 public:
  explicit CpuDevice(const SessionConfig& config)
      : Device("cpu", 0, config),
        threads_(config.intra_op_parallelism > 0
                     ? config.intra_op_parallelism
                     : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()))) {}
  DataTransfer& data_transfer() override { return transfer_; }
  int IntraOpThreads() const override { return threads_; }
  // gemm_tuner: auto_tune_mode's tuner, null when tuning is off.
  GemmTuner* gemm_tuner() const { return gemm_tuner_.get(); }
  void set_gemm_tuner(std::unique_ptr<GemmTuner> t) { gemm_tuner_ = std::move(t); }

 private:
  int threads_;
  CpuDataTransfer transfer_;
  std::unique_ptr<GemmTuner> gemm_tuner_;
};

}  // namespace

GemmTuner* CpuGemmTuner(Device* device) {
  auto* cpu = dynamic_cast<CpuDevice*>(device);
  return cpu == nullptr ? nullptr : cpu->gemm_tuner();
}

// op_select_implmode's high_precision / high_performance variants (implmode_kernels.cc).
void RegisterCpuImplModeKernels(KernelRegistry& r);

void RegisterCpuBackend() {
  static std::once_flag once;
  std::call_once(once, [] {
    DeviceRegistry::Global().Register(
        "cpu", [](const SessionConfig& config) -> StatusOr<std::unique_ptr<Device>> {
          auto device = std::make_unique<CpuDevice>(config);
          if (!config.auto_tune_mode.empty()) {
            RECSDK_ASSIGN_OR_RETURN(
                auto tuner, GemmTuner::Create(config.tune_bank_path, device->IntraOpThreads()));
            device->set_gemm_tuner(std::move(tuner));
          }
          return std::unique_ptr<Device>(std::move(device));
        });
    KernelRegistry& r = KernelRegistry::Global();
    RegisterCpuArrayKernels(r);
    RegisterCpuMathKernels(r);
    RegisterCpuMatMulKernels(r);
    RegisterCpuNnKernels(r);
    RegisterCpuStateKernels(r);
    RegisterCpuRandomKernels(r);
    RegisterCpuTableKernels(r);
    RegisterCpuImplModeKernels(r);
    RegisterCpuBf16Kernels(r);
  });
}

}  // namespace recsdk::internal
