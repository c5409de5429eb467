// device.cc: the registry of device backends.
#include "src/device/device.h"

#include <map>
#include <mutex>

#include "fmt/format.h"

namespace recsdk::internal {

DeviceRegistry& DeviceRegistry::Global() {
  static DeviceRegistry* r = new DeviceRegistry();
  return *r;
}

namespace {
std::mutex& RegistryMutex() {
  static std::mutex mu;
  return mu;
}
struct RegisteredDevice {
  DeviceFactory factory;
  MemoryKind memory = MemoryKind::kHost;
};
std::map<std::string, RegisteredDevice>& Factories() {
  static auto* f = new std::map<std::string, RegisteredDevice>();
  return *f;
}
std::string RegisteredNames() {
  std::string known;
  for (const auto& [k, v] : Factories()) known += (known.empty() ? "" : ", ") + k;
  return known;
}
}  // namespace

void DeviceRegistry::Register(const std::string& type, DeviceFactory factory, MemoryKind memory) {
  std::lock_guard<std::mutex> lock(RegistryMutex());
  Factories()[type] = RegisteredDevice{std::move(factory), memory};
}

namespace {
// Registered: a copy of the entry of `type`; NotFound naming the registered types otherwise.
StatusOr<RegisteredDevice> Registered(const std::string& type) {
  std::lock_guard<std::mutex> lock(RegistryMutex());
  auto it = Factories().find(type);
  if (it == Factories().end()) {
    return absl::NotFoundError(
        fmt::format("device \"{}\" is not registered in this build (registered: {}); set "
                    "SessionConfig::device to one of them",
                    type, RegisteredNames()));
  }
  return it->second;
}
}  // namespace

StatusOr<MemoryKind> DeviceRegistry::Memory(const std::string& type) const {
  auto entry = Registered(type);
  if (!entry.ok()) return entry.status();
  return entry->memory;
}

StatusOr<std::unique_ptr<Device>> DeviceRegistry::Create(const std::string& type,
                                                         const SessionConfig& config) const {
  auto entry = Registered(type);
  if (!entry.ok()) return entry.status();
  // The factory runs outside the lock: it may register or look up devices itself.
  return entry->factory(config);
}

std::vector<std::string> DeviceRegistry::Types() const {
  std::lock_guard<std::mutex> lock(RegistryMutex());
  std::vector<std::string> out;
  for (const auto& [k, v] : Factories()) out.push_back(k);
  return out;
}

}  // namespace recsdk::internal
