// resource_mgr.cc
#include "src/device/resource_mgr.h"

#include <cstring>

#include "fmt/format.h"
#include "src/common/status_macros.h"

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
