// The `cuda` object of the addon (only in a build that found CUDA, cuDNN, cuBLAS and NCCL): the GPU
// backend's kernels with the CPU backend's signatures (arrays name their device mirrors), the
// transfers between host and device, and NCCL communicators.
#pragma once
#include <napi.h>

namespace ft::cuda {

Napi::Object Exports(Napi::Env env);

// NCCL communicators (nccl_comm.cc), added to `exports`.
void AddNcclExports(Napi::Env env, Napi::Object exports);

}  // namespace ft::cuda
