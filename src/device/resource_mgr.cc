// resource_mgr.cc
#include "src/device/resource_mgr.h"

#include <cstring>

#include "fmt/format.h"
#include "src/common/status_macros.h"
#include "src/device/device.h"

namespace recsdk::internal {

std::string VariableResource::DebugString() const {
  return fmt::format("Variable<{}, {}>", DTypeName(dtype_), shape_.ToString());
}

Resource* ResourceMgr::LookupOrCreate(const std::string& name,
                                      const std::function<std::unique_ptr<Resource>()>& make) {
  std::lock_guard<std::mutex> lock(mu_);
  auto& slot = resources_[name];
  if (!slot) slot = make();
  return slot.get();
}

Resource* ResourceMgr::Lookup(const std::string& name) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = resources_.find(name);
  return it == resources_.end() ? nullptr : it->second.get();
}

StatusOr<Tensor> ResourceMgr::ToHost(const Tensor& t) const {
  if (!t.IsInitialized() || t.on_host()) return t;
  if (transfer_ == nullptr) {
    return absl::InternalError(
        "a tensor in device memory but the resource manager has no data transfer to read it");
  }
  RECSDK_ASSIGN_OR_RETURN(Tensor host, Tensor::Create(t.dtype(), t.shape()));
  RECSDK_RETURN_IF_ERROR(transfer_->CopyDeviceToHost(t, &host));
  return host;
}

StatusOr<Tensor> ResourceMgr::ReadVariable(const std::string& name) const {
  auto* v = dynamic_cast<VariableResource*>(Lookup(name));
  if (v == nullptr) return Tensor();
  std::lock_guard<std::mutex> lock(v->mu);
  return ToHost(v->value);
}

StatusOr<Tensor> ResourceMgr::ToDevice(const Tensor& t) const {
  if (!t.IsInitialized() || variable_allocator_ == nullptr ||
      variable_allocator_->memory_kind() != MemoryKind::kDevice) {
    return t;
  }
  if (transfer_ == nullptr) {
    return absl::InternalError(
        "the variable pool is device memory but the resource manager has no data transfer");
  }
  RECSDK_ASSIGN_OR_RETURN(Tensor device, variable_allocator_->AllocateTensor(t.dtype(), t.shape(),
                                                                             Fill::kUninitialized));
  RECSDK_RETURN_IF_ERROR(transfer_->CopyHostToDevice(t, &device));
  return device;
}

void ResourceMgr::Clear() {
  std::lock_guard<std::mutex> lock(mu_);
  resources_.clear();
}

Tensor MakeResourceTensor(Resource* resource) {
  Tensor t(DType::kResource, Shape{});
  std::memcpy(t.raw_data(), &resource, sizeof(resource));
  return t;
}

Resource* ResourceFromTensor(const Tensor& t) {
  if (t.dtype() != DType::kResource || t.raw_data() == nullptr) return nullptr;
  Resource* r;
  std::memcpy(&r, t.raw_data(), sizeof(r));
  return r;
}

}  // namespace recsdk::internal
