// separate_memory_device.h: the separate-memory test device (separate_memory_device.cc says what
// it traps and why). "separate_memory" is registered by RegisterSeparateMemoryBackend (device.h)
// with every CPU kernel; CreateSeparateMemoryDevice makes one under another type name, for tests
// that register a device with only some kernels (the placement pass's host fallback).
#ifndef RECSDK_DEVICE_SEPARATE_MEMORY_SEPARATE_MEMORY_DEVICE_H_
#define RECSDK_DEVICE_SEPARATE_MEMORY_SEPARATE_MEMORY_DEVICE_H_

#include <memory>
#include <string>

#include "src/device/device.h"

namespace recsdk::internal {

// CreateSeparateMemoryDevice: a device named `type` whose pools (of the config's limits) live in
// an arena the host cannot touch outside the device's own work. ResourceExhausted when the
// address range cannot be reserved.
StatusOr<std::unique_ptr<Device>> CreateSeparateMemoryDevice(const std::string& type,
                                                             const SessionConfig& config);

}  // namespace recsdk::internal

#endif  // RECSDK_DEVICE_SEPARATE_MEMORY_SEPARATE_MEMORY_DEVICE_H_
