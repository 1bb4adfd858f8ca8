// Device memory of the GPU backend: the mirrors of host ranges (see device_memory.h).
#include "device_memory.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <stdexcept>

#include <napi.h>

#include "cuda_check.h"

namespace ft::cuda {

void Fail(const char* call, const std::string& message) {
  throw std::runtime_error(std::string("GPU backend: ") + call + ": " + message);
}

namespace {
// One ArrayBuffer's mirror, by its host start address; `buffer` is a weak reference, empty once JS
// collected the buffer (V8 clears it before the buffer's memory can be reused).
struct BufferMirror {
  size_t bytes;
  char* device;
  Napi::Reference<Napi::ArrayBuffer> buffer;
};
std::map<uintptr_t, BufferMirror>& Mirrors() {
  static std::map<uintptr_t, BufferMirror> mirrors;
  return mirrors;
}
size_t heldBytes = 0;

struct ScratchBuffer {
  void* device = nullptr;
  size_t bytes = 0;
};
std::array<ScratchBuffer, static_cast<size_t>(Scratch::kCount)> scratch;

// Frees the mirrors of collected buffers, and of any buffer overlapping host bytes [start, end)
// (only a collected one can: its memory now belongs to the buffer being mirrored).
void FreeStale(uintptr_t start, uintptr_t end) {
  auto& mirrors = Mirrors();
  for (auto it = mirrors.begin(); it != mirrors.end();) {
    const bool overlaps = it->first < end && start < it->first + it->second.bytes;
    if (overlaps || it->second.buffer.Value().IsEmpty()) {
      FT_CUDA_CHECK(cudaFree(it->second.device));
      heldBytes -= it->second.bytes;
      it = mirrors.erase(it);
    } else {
      ++it;
    }
  }
}
}  // namespace

int Device() {
  static const int device = [] {
    int count = 0;
    FT_CUDA_CHECK(cudaGetDeviceCount(&count));
    const char* localRank = std::getenv("OMPI_COMM_WORLD_LOCAL_RANK");
    int chosen = (localRank != nullptr ? std::atoi(localRank) : 0) % count;
    FT_CUDA_CHECK(cudaSetDevice(chosen));
    return chosen;
  }();
  return device;
}

void* Mirror(const Napi::TypedArray& array) {
  Device();
  Napi::ArrayBuffer buffer = array.ArrayBuffer();
  const uintptr_t start = reinterpret_cast<uintptr_t>(buffer.Data());
  const size_t bytes = std::max<size_t>(buffer.ByteLength(), 1);
  auto& mirrors = Mirrors();
  auto found = mirrors.find(start);
  if (found != mirrors.end() && found->second.bytes == bytes) {
    Napi::ArrayBuffer held = found->second.buffer.Value();
    if (!held.IsEmpty() && held.StrictEquals(buffer)) return found->second.device + array.ByteOffset();
  }
  FreeStale(start, start + bytes);
  char* device = nullptr;
  FT_CUDA_CHECK(cudaMalloc(&device, bytes));
  FT_CUDA_CHECK(cudaMemset(device, 0, bytes));
  heldBytes += bytes;
  mirrors.emplace(start, BufferMirror{bytes, device, Napi::Reference<Napi::ArrayBuffer>::New(buffer, 0)});
  return device + array.ByteOffset();
}

void Upload(const void* host, const Napi::TypedArray& mirrored) {
  if (mirrored.ByteLength() == 0) return;
  FT_CUDA_CHECK(cudaMemcpy(Mirror(mirrored), host, mirrored.ByteLength(), cudaMemcpyHostToDevice));
}

void Download(const Napi::TypedArray& mirrored, void* host) {
  if (mirrored.ByteLength() == 0) return;
  FT_CUDA_CHECK(cudaMemcpy(host, Mirror(mirrored), mirrored.ByteLength(), cudaMemcpyDeviceToHost));
}

void* ScratchOf(Scratch purpose, size_t bytes) {
  Device();
  ScratchBuffer& buffer = scratch[static_cast<size_t>(purpose)];
  if (buffer.bytes < bytes) {
    if (buffer.device != nullptr) FT_CUDA_CHECK(cudaFree(buffer.device));
    heldBytes -= buffer.bytes;
    buffer = {};
    FT_CUDA_CHECK(cudaMalloc(&buffer.device, bytes));
    buffer.bytes = bytes;
    heldBytes += bytes;
  }
  return buffer.device;
}

size_t HeldBytes() { return heldBytes; }

}  // namespace ft::cuda
