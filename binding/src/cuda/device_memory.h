// Device memory of the GPU backend. Its kernels take the same Float32Arrays as the CPU backend's,
// but there an array names its device copy, its mirror: kernels read and write device memory only,
// and bytes cross to or from the host only where upload() and download() say so (the net's input and
// parameters before a step, its gradients and logits after). A mirror stands for a whole ArrayBuffer,
// so that a view (a layer's weights) and its buffer (all parameters) share device memory as they
// share host memory. It lives as long as its buffer: the registry holds each buffer weakly, and a
// buffer collected by JS frees its mirror when the next mirror is made. So an address that JS
// reuses for a new buffer never finds an old buffer's device memory.
#pragma once
#include <cstddef>

namespace Napi {
class TypedArray;
}

namespace ft::cuda {

// Selects this process's GPU once (Open MPI's local rank modulo the GPUs seen) and returns it.
int Device();

// The device memory standing for `array` (zeroed when its buffer's mirror is first made).
// Main thread only: it looks at JS values.
void* Mirror(const Napi::TypedArray& array);

template <typename T>
T* MirrorOf(const Napi::TypedArray& array) {
  return static_cast<T*>(Mirror(array));
}

// Copies array.ByteLength() host bytes at `host` into the mirror of `mirrored`.
void Upload(const void* host, const Napi::TypedArray& mirrored);
// Copies the mirror of `mirrored` into the host bytes at `host` (mirrored.ByteLength() of them).
void Download(const Napi::TypedArray& mirrored, void* host);

// Device memory kept for one purpose (a workspace, labels, partial sums), grown as needed and reused.
enum class Scratch { kWorkspace, kLabels, kRowLoss, kPartials, kWeightPartials, kChannelTotals, kAttention, kTokens, kFirstBad, kCount };
void* ScratchOf(Scratch purpose, size_t bytes);

// Bytes of device memory held by mirrors and scratch.
size_t HeldBytes();

}  // namespace ft::cuda
