// kernel.cc
#include "src/device/kernel.h"

namespace recsdk::internal {

void OpKernelContext::set_output(int i, Tensor t) {
  if (t.num_elements() > 0 && t.on_host() && t.dtype() != DType::kResource &&
      device_->memory_kind() == MemoryKind::kDevice) {
    auto on_device =
        device_->graph_allocator().AllocateTensor(t.dtype(), t.shape(), Fill::kUninitialized);
    // Out of memory leaves the host tensor, which the executor's memory check then names.
    if (on_device.ok() && device_->data_transfer().CopyHostToDevice(t, &*on_device).ok()) {
      t = *std::move(on_device);
    }
  }
  (*outputs_)[i] = std::move(t);
}

StatusOr<Tensor*> OpKernelContext::allocate_output(int i, const Shape& shape, DType dtype,
                                                   Fill fill) {
  auto t = device_->graph_allocator().AllocateTensor(dtype, shape, fill);
  if (!t.ok()) {
    return absl::ResourceExhaustedError(fmt::format("op \"{}\" ({}): output {} {} {}: {}",
                                                    node_.name(), node_.type(), i, DTypeName(dtype),
                                                    shape.ToString(), t.status().message()));
  }
  (*outputs_)[i] = *std::move(t);
  return &(*outputs_)[i];
}

KernelRegistry& KernelRegistry::Global() {
  static KernelRegistry* r = new KernelRegistry();
  return *r;
}

void KernelRegistry::Register(const std::string& op, const std::string& device, DType dtype,
                              KernelFactory factory, const std::string& impl_mode) {
  std::lock_guard<std::mutex> lock(mu_);
  kernels_[{op, device, dtype, impl_mode}] = std::move(factory);
}

void KernelRegistry::RegisterFn(const std::string& op, const std::string& device,
                                std::vector<DType> dtypes, LambdaKernel::Fn fn,
                                const std::string& impl_mode) {
  for (DType d : dtypes) {
    Register(
        op, device, d,
        [fn](const Node&) -> StatusOr<std::unique_ptr<OpKernel>> {
          return std::unique_ptr<OpKernel>(new LambdaKernel(fn));
        },
        impl_mode);
  }
}

const KernelFactory* KernelRegistry::Find(const std::string& op, const std::string& device,
                                          DType dtype, const std::string& impl_mode) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto alias = aliases_.find(device);
  for (const std::string* type : {&device, alias == aliases_.end() ? nullptr : &alias->second}) {
    if (type == nullptr) continue;
    for (const std::string& mode : {impl_mode, std::string()}) {
      for (DType d : {dtype, DType::kInvalid}) {
        auto it = kernels_.find({op, *type, d, mode});
        if (it != kernels_.end()) return &it->second;
      }
    }
  }
  return nullptr;
}

void KernelRegistry::AddAlias(const std::string& device, const std::string& kernels_of) {
  std::lock_guard<std::mutex> lock(mu_);
  aliases_[device] = kernels_of;
}

std::vector<DType> KernelRegistry::DTypesFor(const std::string& op,
                                             const std::string& device) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto alias = aliases_.find(device);
  std::vector<DType> out;
  for (const auto& [key, f] : kernels_) {
    if (std::get<0>(key) == op &&
        (std::get<1>(key) == device ||
         (alias != aliases_.end() && std::get<1>(key) == alias->second))) {
      out.push_back(std::get<2>(key));
    }
  }
  return out;
}

DType KernelDType(const Node& node) {
  for (const Output& in : node.inputs()) {
    if (in.dtype() != DType::kResource) return in.dtype();
  }
  if (node.num_outputs() > 0) return node.output_dtype(0);
  return DType::kInvalid;
}

}  // namespace recsdk::internal
