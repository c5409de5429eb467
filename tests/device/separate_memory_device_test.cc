// separate_memory_device_test.cc: the separate-memory test device (src/device/separate_memory/):
// its memory is device memory the host cannot touch outside the device's own work, copies cross
// only through its DataTransfer, and its pools reuse and coalesce the arena.
#include "src/device/separate_memory/separate_memory_device.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "src/device/kernel.h"
#include "src/session/runtime.h"

namespace recsdk::internal {
namespace {

// MakeDevice: the arena is the two pools' limits together.
std::unique_ptr<Device> MakeDevice(int64_t graph_bytes = 64 << 20,
                                   int64_t variable_bytes = 16 << 20) {
  InitializeRuntime();
  SessionConfig config;
  config.graph_memory_max_size = graph_bytes;
  config.variable_memory_max_size = variable_bytes;
  auto device = DeviceRegistry::Global().Create("separate_memory", config);
  EXPECT_TRUE(device.ok()) << device.status();
  return std::move(device).value();
}

Tensor ToDevice(Device& d, const Tensor& host) {
  Tensor t =
      d.graph_allocator().AllocateTensor(host.dtype(), host.shape(), Fill::kUninitialized).value();
  EXPECT_TRUE(d.data_transfer().CopyHostToDevice(host, &t).ok());
  return t;
}

Tensor ToHost(Device& d, const Tensor& device) {
  Tensor host(device.dtype(), device.shape());
  EXPECT_TRUE(d.data_transfer().CopyDeviceToHost(device, &host).ok());
  return host;
}

TEST(SeparateMemoryDeviceTest, TensorsLiveInDeviceMemory) {
  auto d = MakeDevice();
  EXPECT_EQ(d->memory_kind(), MemoryKind::kDevice);
  EXPECT_EQ(DeviceRegistry::Global().Memory("separate_memory").value(), MemoryKind::kDevice);
  EXPECT_EQ(DeviceRegistry::Global().Memory("cpu").value(), MemoryKind::kHost);
  Tensor t = d->graph_allocator().AllocateTensor(DType::kFloat32, Shape{4}).value();
  EXPECT_EQ(t.memory_kind(), MemoryKind::kDevice);
  EXPECT_FALSE(t.on_host());
  // A fresh tensor is zero-filled through the device; the host sees it only through a copy.
  const Tensor back = ToHost(*d, t);
  for (float v : back.flat<float>()) EXPECT_EQ(v, 0.0f);
  EXPECT_NE(t.DebugString().find("in device memory"), std::string::npos);
  EXPECT_EQ(std::string(MemoryKindName(MemoryKind::kPinnedHost)), "pinned_host");
}

TEST(SeparateMemoryDeviceTest, CopiesRoundTripAndRefuseWrongSides) {
  auto d = MakeDevice();
  const Tensor host = Tensor::FromValues<float>(Shape{2, 3}, {1, 2, 3, 4, 5, 6}).value();
  const Tensor dev = ToDevice(*d, host);
  const Tensor back = ToHost(*d, dev);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(back.flat<float>()[i], host.flat<float>()[i]);

  Tensor wrong_dtype(DType::kInt32, Shape{2, 3});
  Status s = d->data_transfer().CopyDeviceToHost(dev, &wrong_dtype);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("allocate the destination"), std::string::npos) << s;
  // A host tensor is not device memory: "copying" it to the host would hide a missing copy.
  Tensor host_dst(DType::kFloat32, Shape{2, 3});
  s = d->data_transfer().CopyDeviceToHost(host, &host_dst);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("not in this device's memory"), std::string::npos) << s;
}

TEST(SeparateMemoryDeviceTest, DeviceWorkReadsItsMemoryOnItsStream) {
  auto d = MakeDevice();
  const Tensor dev = ToDevice(*d, Tensor::FromValues<float>(Shape{3}, {1, 2, 4}).value());
  float sum = 0;
  const Status s = d->compute_stream().Run([&] {
    for (float v : dev.flat<float>()) sum += v;
    return absl::OkStatus();
  });
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_EQ(sum, 7.0f);
  auto event = d->compute_stream().Record();
  ASSERT_TRUE(event.ok());
  EXPECT_TRUE((*event)->Done());
  EXPECT_TRUE((*event)->Wait(absl::Seconds(1)).ok());
  EXPECT_TRUE(d->compute_stream().Synchronize(absl::Seconds(1)).ok());
}

// The device tier's swap-ins (tier_memory.h) are queued on the device's copy stream, which runs
// them only when their event is waited for: Write returns with the copy not run (no host wait),
// the staged rows belong to the copy (the caller's buffer may change at once), the compute
// stream's wait (ComputeAfterWrites) runs it, and a Read after a Write gets the written rows.
TEST(SeparateMemoryDeviceTest, TierSwapInsAreQueuedUntilComputeWaitsForThem) {
  auto d = MakeDevice();
  ASSERT_NE(&d->copy_stream(), &d->compute_stream());
  auto memory = d->CreateTableTierMemory(8, 2, "table \"t\"");
  ASSERT_TRUE(memory.ok()) << memory.status();
  ASSERT_NE(*memory, nullptr);
  DeviceTierMemory& m = **memory;
  const TierSwapCounters& c = d->tier_swaps();
  std::vector<float> rows = {1, 2, 3, 4};
  const std::vector<uint32_t> slots = {2, 3};
  ASSERT_TRUE(m.Write(slots, rows.data()).ok());
  std::fill(rows.begin(), rows.end(), 9.0f);  // the caller's buffer is its own again
  auto queued = d->copy_stream().Record();
  ASSERT_TRUE(queued.ok());
  EXPECT_FALSE((*queued)->Done());  // Write did not wait for its copy
  EXPECT_EQ(c.swap_in_rows.load(), 2);
  EXPECT_EQ(c.swap_in_bytes.load(), 16);
  EXPECT_EQ(c.swap_in_host_waits.load(), 0);
  EXPECT_EQ(c.compute_waits.load(), 0);
  // The step's gather: the compute stream waits for the queued copy, which runs then.
  ASSERT_TRUE(m.ComputeAfterWrites().ok());
  EXPECT_TRUE((*queued)->Done());
  EXPECT_EQ(c.compute_waits.load(), 1);
  ASSERT_TRUE(m.ComputeAfterWrites().ok());
  EXPECT_EQ(c.compute_waits.load(), 1);  // nothing left in flight
  std::vector<float> back(4);
  ASSERT_TRUE(m.Read(slots, back.data()).ok());
  EXPECT_EQ(back, (std::vector<float>{1, 2, 3, 4}));
  EXPECT_EQ(c.swap_out_host_waits.load(), 1);
  // A Read after a queued Write of the same slot is ordered by the copy stream.
  const std::vector<float> row5 = {7, 8};
  const std::vector<uint32_t> slot5 = {5};
  ASSERT_TRUE(m.Write(slot5, row5.data()).ok());
  std::vector<float> got(2);
  ASSERT_TRUE(m.Read(slot5, got.data()).ok());
  EXPECT_EQ(got, row5);
  EXPECT_EQ(c.swap_out_bytes.load(), 24);
  EXPECT_EQ(c.swap_in_host_waits.load(), 0);
  // A slot past the rows changes nothing.
  const std::vector<uint32_t> bad = {8};
  EXPECT_EQ(m.Write(bad, row5.data()).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(c.swap_in_rows.load(), 3);
}

// Swap-outs (ReadAsync): queued, no host wait; a Write of the same slot queued after it (the slot
// taking an arriving row) does not reach the rows read; WaitRead runs the copy and counts the one
// host wait; a slot past the rows is InvalidArgument.
TEST(SeparateMemoryDeviceTest, TierSwapOutsAreQueuedUntilTheHostTierTakesThem) {
  auto d = MakeDevice();
  auto memory = d->CreateTableTierMemory(8, 2, "table \"t\"");
  ASSERT_TRUE(memory.ok()) << memory.status();
  DeviceTierMemory& m = **memory;
  const TierSwapCounters& c = d->tier_swaps();
  const std::vector<float> rows = {1, 2, 3, 4};
  const std::vector<uint32_t> slots = {2, 3};
  ASSERT_TRUE(m.Write(slots, rows.data()).ok());
  auto down = m.ReadAsync(slots, internal::SwapOutOrder::kAfterQueuedCompute);
  ASSERT_TRUE(down.ok()) << down.status();
  ASSERT_NE(down->done, nullptr);
  EXPECT_FALSE(down->done->Done());  // queued behind the swap-in, nothing ran
  const std::vector<float> next = {7, 8};
  const std::vector<uint32_t> slot2 = {2};
  ASSERT_TRUE(m.Write(slot2, next.data()).ok());  // the freed slot takes an arriving row
  EXPECT_EQ(c.swap_out_host_waits.load(), 0);
  ASSERT_TRUE(m.WaitRead(*down).ok());
  EXPECT_EQ(*down->rows, rows);  // the rows as they were when the swap-out was queued
  EXPECT_EQ(c.swap_out_host_waits.load(), 1);
  EXPECT_EQ(c.swap_out_rows.load(), 2);
  ASSERT_TRUE(m.WaitRead(*down).ok());
  EXPECT_EQ(c.swap_out_host_waits.load(), 1);  // done: no second wait
  std::vector<float> got(2);
  ASSERT_TRUE(m.Read(slot2, got.data()).ok());
  EXPECT_EQ(got, next);
  const std::vector<uint32_t> bad = {8};
  EXPECT_EQ(m.ReadAsync(bad, internal::SwapOutOrder::kAfterQueuedCompute).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(SeparateMemoryDeviceDeathTest, HostReadOfDeviceMemoryTraps) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        auto d = MakeDevice();
        const Tensor dev = ToDevice(*d, Tensor::FromValues<float>(Shape{1}, {5}).value());
        volatile float v = dev.data<float>()[0];  // the bug the device exists to catch
        (void)v;
      },
      "");
}

TEST(SeparateMemoryDeviceTest, FreedMemoryIsReusedAndCoalesced) {
  // An arena of 8 MiB: four 2 MiB buffers fill it; after they go, one 6 MiB buffer needs the
  // freed blocks merged back into one.
  auto d = MakeDevice(8 << 20, 0);
  {
    std::vector<Tensor> parts;
    for (int i = 0; i < 4; ++i) {
      auto t =
          d->graph_allocator().AllocateTensor(DType::kUInt8, Shape{2 << 20}, Fill::kUninitialized);
      ASSERT_TRUE(t.ok()) << t.status();
      parts.push_back(*t);
    }
  }
  d->graph_allocator().ReleaseCache();
  auto big = d->graph_allocator().AllocateTensor(DType::kUInt8, Shape{6 << 20});
  EXPECT_TRUE(big.ok()) << big.status();
  auto too_big = d->graph_allocator().AllocateTensor(DType::kUInt8, Shape{4 << 20});
  EXPECT_EQ(too_big.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(too_big.status().message().find("graph_memory_max_size"), std::string::npos)
      << too_big.status();
}

TEST(SeparateMemoryDeviceTest, VariablesCrossThroughTheResourceManager) {
  auto d = MakeDevice();
  ResourceMgr rm;
  rm.set_variable_allocator(&d->variable_allocator());
  rm.set_data_transfer(&d->data_transfer());
  const Tensor host = Tensor::FromValues<int64_t>(Shape{2}, {7, 9}).value();
  const Tensor dev = rm.ToDevice(host).value();
  EXPECT_FALSE(dev.on_host());
  auto* v = dynamic_cast<VariableResource*>(rm.LookupOrCreate(
      "v", [] { return std::make_unique<VariableResource>(DType::kInt64, Shape{2}); }));
  v->value = dev;
  const Tensor read = rm.ReadVariable("v").value();
  ASSERT_TRUE(read.on_host());
  EXPECT_EQ(read.flat<int64_t>()[0], 7);
  EXPECT_EQ(read.flat<int64_t>()[1], 9);
  EXPECT_FALSE(rm.ReadVariable("absent").value().IsInitialized());
  // Host memory stays as it is: a CPU session's variables are never copied.
  ResourceMgr host_rm;
  EXPECT_TRUE(host_rm.ToDevice(host).value().SharesBufferWith(host));
}

}  // namespace
}  // namespace recsdk::internal
