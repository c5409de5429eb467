// copy_kernels.cc: CopyHostToDevice and CopyDeviceToHost, the copies the placement pass inserts
// where an edge crosses memory spaces, for any device through its DataTransfer.
//
// Order: a copy to the device runs on the copy stream after the compute stream's work so far (an
// event) and the compute stream waits for the copy (an event) before its next kernel; a copy to
// the host is waited for on the host, with a deadline, before its consumer (a host op) may read
// it. On a device with one synchronous stream every event is already complete.
#include "absl/time/time.h"
#include "fmt/format.h"
#include "src/common/status_macros.h"
#include "src/device/kernel.h"

namespace recsdk::internal {
namespace {

// The longest a host op waits for a copy from the device.
constexpr absl::Duration kCopyDeadline = absl::Minutes(5);

Status ExpectMemory(OpKernelContext& ctx, const Tensor& t, bool host) {
  if (t.num_elements() == 0 || t.on_host() == host) return absl::OkStatus();
  return absl::InternalError(fmt::format(
      "op \"{}\" ({}) on {}: its input is in {} memory but the copy expects {} memory; the "
      "placement pass put the copy on the wrong edge",
      ctx.node().name(), ctx.node().type(), ctx.device()->name(), MemoryKindName(t.memory_kind()),
      host ? "host" : "device"));
}

// Ordered: runs `copy` on the device's copy stream after the compute stream's work so far, and
// returns the event that marks the copy's end.
StatusOr<std::shared_ptr<Event>> Ordered(Device& device, const std::function<Status()>& copy) {
  Stream& compute = device.compute_stream();
  Stream& copies = device.copy_stream();
  if (&copies != &compute) {
    RECSDK_ASSIGN_OR_RETURN(std::shared_ptr<Event> before, compute.Record());
    RECSDK_RETURN_IF_ERROR(copies.WaitFor(*before));
  }
  RECSDK_RETURN_IF_ERROR(copies.Run([&] { return copy(); }));
  return copies.Record();
}

Status CopyHostToDeviceKernel(OpKernelContext& ctx) {
  const Tensor& in = ctx.input(0);
  RECSDK_RETURN_IF_ERROR(ExpectMemory(ctx, in, /*host=*/true));
  RECSDK_ASSIGN_OR_RETURN(Tensor * out,
                          ctx.allocate_output(0, in.shape(), in.dtype(), Fill::kUninitialized));
  Device& device = *ctx.device();
  RECSDK_ASSIGN_OR_RETURN(std::shared_ptr<Event> done, Ordered(device, [&] {
                            return device.data_transfer().CopyHostToDevice(in, out);
                          }));
  if (&device.copy_stream() != &device.compute_stream()) {
    RECSDK_RETURN_IF_ERROR(device.compute_stream().WaitFor(*done));
  }
  return absl::OkStatus();
}

Status CopyDeviceToHostKernel(OpKernelContext& ctx) {
  const Tensor& in = ctx.input(0);
  RECSDK_RETURN_IF_ERROR(ExpectMemory(ctx, in, /*host=*/false));
  RECSDK_ASSIGN_OR_RETURN(Tensor out, Tensor::Create(in.dtype(), in.shape()));
  Device& device = *ctx.device();
  RECSDK_ASSIGN_OR_RETURN(std::shared_ptr<Event> done, Ordered(device, [&] {
                            return device.data_transfer().CopyDeviceToHost(in, &out);
                          }));
  if (Status s = done->Wait(kCopyDeadline); !s.ok()) {
    return absl::DeadlineExceededError(fmt::format(
        "op \"{}\" (CopyDeviceToHost): the copy from {} did not finish within {}: {}",
        ctx.node().name(), device.name(), absl::FormatDuration(kCopyDeadline), s.message()));
  }
  *ctx.output(0) = std::move(out);  // stays in host memory (set_output would upload it)
  return absl::OkStatus();
}

}  // namespace

void RegisterCopyKernels(KernelRegistry& r, const std::string& device) {
  r.RegisterFn("CopyHostToDevice", device, {DType::kInvalid}, CopyHostToDeviceKernel);
  r.RegisterFn("CopyDeviceToHost", device, {DType::kInvalid}, CopyDeviceToHostKernel);
}

}  // namespace recsdk::internal
