// cuda_error.h: CUDA and cuBLAS error codes as Status, for the CUDA backend's .cc files (internal;
// plain types, so it includes no CUDA header). Thread-safe.
#ifndef RECSDK_SRC_DEVICE_CUDA_CUDA_ERROR_H_
#define RECSDK_SRC_DEVICE_CUDA_CUDA_ERROR_H_

#include <string_view>

#include "recsdk/status.h"
#include "src/common/status_macros.h"

namespace recsdk::cuda {

// CudaStatus: OK for cudaSuccess, else the error's name and text after `what`
// (ResourceExhausted for an allocation failure, InvalidArgument for a bad value or launch
// configuration, Internal otherwise). Clears the runtime's last error.
Status CudaStatus(int cuda_error, std::string_view what);
// CublasStatus: the same for a cublasStatus_t.
Status CublasStatus(int cublas_status, std::string_view what);

}  // namespace recsdk::cuda

#endif  // RECSDK_SRC_DEVICE_CUDA_CUDA_ERROR_H_
