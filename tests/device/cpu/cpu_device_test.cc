// cpu_device_test.cc: the CPU backend's DataTransfer (src/device/cpu/cpu_device.cc): host <->
// device copies keep every byte, copy rather than share, and refuse a destination whose dtype
// or shape differs from the source's.
#include <cstring>
#include <memory>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "recsdk/config.h"
#include "recsdk/tensor.h"
#include "src/device/device.h"

namespace recsdk::internal {
namespace {

using ::testing::HasSubstr;

std::unique_ptr<Device> CpuDevice() {
  RegisterCpuBackend();
  auto device = DeviceRegistry::Global().Create("cpu", SessionConfig{});
  EXPECT_TRUE(device.ok()) << device.status();
  return device.ok() ? std::move(*device) : nullptr;
}

bool SameBytes(const Tensor& a, const Tensor& b) {
  return a.TotalBytes() == b.TotalBytes() &&
         std::memcmp(a.raw_data(), b.raw_data(), a.TotalBytes()) == 0;
}

TEST(CpuDataTransferTest, CopiesEveryByteBothWays) {
  auto device = CpuDevice();
  ASSERT_NE(device, nullptr);
  DataTransfer& transfer = device->data_transfer();
  std::vector<Tensor> hosts = {
      *Tensor::FromValues<float>(Shape{2, 3}, {1.5f, -0.0f, 3e38f, -7.25f, 1e-40f, 42.0f}),
      *Tensor::FromValues<int64_t>(Shape{3}, {INT64_MIN, -1, INT64_MAX}),
      *Tensor::FromValues<int32_t>(Shape{1, 1, 2}, {7, -7}),
      *Tensor::FromValues<uint8_t>(Shape{5}, {0, 1, 127, 128, 255}),
  };
  Tensor half(DType::kFloat16, Shape{3});
  half.data<float16>()[0].bits = 0x3c00;
  half.data<float16>()[1].bits = 0x7e01;  // a NaN payload must survive a byte copy
  half.data<float16>()[2].bits = 0x8001;
  hosts.push_back(half);
  for (const Tensor& host : hosts) {
    SCOPED_TRACE(::testing::Message() << DTypeName(host.dtype()) << " " << host.shape().ToString());
    auto on_device = device->graph_allocator().AllocateTensor(host.dtype(), host.shape());
    ASSERT_TRUE(on_device.ok()) << on_device.status();
    ASSERT_TRUE(transfer.CopyHostToDevice(host, &*on_device).ok());
    EXPECT_TRUE(SameBytes(host, *on_device));
    EXPECT_NE(on_device->raw_data(), host.raw_data());  // a copy, not a shared buffer

    Tensor back(host.dtype(), host.shape());
    ASSERT_TRUE(transfer.CopyDeviceToHost(*on_device, &back).ok());
    EXPECT_TRUE(SameBytes(host, back));
    EXPECT_NE(back.raw_data(), on_device->raw_data());
  }
}

TEST(CpuDataTransferTest, LaterWritesToTheSourceDoNotReachTheCopy) {
  auto device = CpuDevice();
  ASSERT_NE(device, nullptr);
  Tensor host = *Tensor::FromValues<float>(Shape{4}, {1, 2, 3, 4});
  auto on_device = device->graph_allocator().AllocateTensor(DType::kFloat32, Shape{4});
  ASSERT_TRUE(on_device.ok());
  ASSERT_TRUE(device->data_transfer().CopyHostToDevice(host, &*on_device).ok());
  host.data<float>()[0] = 100;
  EXPECT_EQ(on_device->data<float>()[0], 1.0f);
  Tensor back(DType::kFloat32, Shape{4});
  ASSERT_TRUE(device->data_transfer().CopyDeviceToHost(*on_device, &back).ok());
  on_device->data<float>()[3] = -1;
  EXPECT_EQ(back.data<float>()[3], 4.0f);
  // The source side is only read.
  EXPECT_EQ(host.data<float>()[3], 4.0f);
}

TEST(CpuDataTransferTest, ZeroElementTensorsCopyNothing) {
  auto device = CpuDevice();
  ASSERT_NE(device, nullptr);
  Tensor host(DType::kFloat32, Shape{0, 8});
  auto on_device = device->graph_allocator().AllocateTensor(DType::kFloat32, Shape{0, 8});
  ASSERT_TRUE(on_device.ok());
  EXPECT_TRUE(device->data_transfer().CopyHostToDevice(host, &*on_device).ok());
  EXPECT_TRUE(device->data_transfer().CopyDeviceToHost(*on_device, &host).ok());
}

TEST(CpuDataTransferTest, MismatchedDestinationIsInvalidArgumentNamingBoth) {
  auto device = CpuDevice();
  ASSERT_NE(device, nullptr);
  DataTransfer& transfer = device->data_transfer();
  const Tensor src = *Tensor::FromValues<float>(Shape{2, 3}, {1, 2, 3, 4, 5, 6});
  struct Case {
    const char* what;
    Tensor dst;
    const char* names;
  };
  for (Case& c : std::vector<Case>{
           {"fewer bytes", Tensor(DType::kFloat32, Shape{2, 2}), "float32 [2,2]"},
           {"same bytes, other dtype", Tensor(DType::kInt32, Shape{2, 3}), "int32 [2,3]"},
           {"same elements, other shape", Tensor(DType::kFloat32, Shape{6}), "float32 [6]"},
           {"uninitialised", Tensor(), "invalid"},
       }) {
    SCOPED_TRACE(c.what);
    std::vector<char> before;
    if (c.dst.TotalBytes() > 0) {
      const char* p = static_cast<const char*>(c.dst.raw_data());
      before.assign(p, p + c.dst.TotalBytes());
    }
    for (const Status& s :
         {transfer.CopyHostToDevice(src, &c.dst), transfer.CopyDeviceToHost(src, &c.dst)}) {
      EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
      EXPECT_THAT(s.message(), HasSubstr("float32 [2,3]"));
      EXPECT_THAT(s.message(), HasSubstr(c.names));
    }
    if (!before.empty()) {  // a refused copy writes nothing
      EXPECT_EQ(std::memcmp(before.data(), c.dst.raw_data(), before.size()), 0);
    }
  }
  EXPECT_EQ(transfer.CopyHostToDevice(src, nullptr).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace recsdk::internal
