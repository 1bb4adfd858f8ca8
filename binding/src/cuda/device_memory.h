// Device memory of the GPU backend. Its kernels take the same Float32Arrays as the CPU backend's,
// but there an array names its device copy, its mirror: kernels read and write device memory only,
// and bytes cross to or from the host only where upload() and download() say so (the net's input and
// parameters before a step, its gradients and logits after). A mirror is found by the host address
// range it stands for. A range that overlaps mirrors without fitting inside one replaces them with
// one mirror of their union, their contents copied in, so that a view (a layer's weights) and its
// whole buffer (all parameters) share device memory as they share host memory.
#pragma once
#include <cstddef>

namespace ft::cuda {

// Selects this process's GPU once (Open MPI's local rank modulo the GPUs seen) and returns it.
int Device();

// The device memory standing for host bytes [host, host + bytes): zeroed when first made.
void* Mirror(const void* host, size_t bytes);

template <typename T>
T* MirrorOf(T* host, size_t count) {
  return static_cast<T*>(Mirror(host, count * sizeof(T)));
}

// Copies `bytes` host bytes at `host` into the mirror of [mirrored, mirrored + bytes).
void Upload(const void* host, const void* mirrored, size_t bytes);
// Copies the mirror of [mirrored, mirrored + bytes) into the host bytes at `host`.
void Download(const void* mirrored, void* host, size_t bytes);

// Device memory kept for one purpose (a workspace, labels, partial sums), grown as needed and reused.
enum class Scratch { kWorkspace, kLabels, kRowLoss, kPartials, kCount };
void* ScratchOf(Scratch purpose, size_t bytes);

// Bytes of device memory held by mirrors and scratch.
size_t HeldBytes();

}  // namespace ft::cuda
