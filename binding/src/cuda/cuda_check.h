// Error checks for CUDA, cuDNN, cuBLAS and NCCL calls: a failure throws std::runtime_error naming
// the call and the library's own message (the addon turns it into a JS Error).
#pragma once
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>
#include <nccl.h>

#include <string>

namespace ft::cuda {

[[noreturn]] void Fail(const char* call, const std::string& message);

inline void Check(cudaError_t status, const char* call) {
  if (status != cudaSuccess) Fail(call, cudaGetErrorString(status));
}
inline void Check(cudnnStatus_t status, const char* call) {
  if (status != CUDNN_STATUS_SUCCESS) Fail(call, cudnnGetErrorString(status));
}
inline void Check(cublasStatus_t status, const char* call) {
  if (status != CUBLAS_STATUS_SUCCESS) Fail(call, cublasGetStatusString(status));
}
inline void Check(ncclResult_t status, const char* call) {
  if (status != ncclSuccess && status != ncclInProgress) Fail(call, ncclGetErrorString(status));
}

}  // namespace ft::cuda

#define FT_CUDA_CHECK(call) ::ft::cuda::Check((call), #call)
