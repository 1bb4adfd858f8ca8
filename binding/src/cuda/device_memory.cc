// Device memory of the GPU backend: the mirrors of host ranges (see device_memory.h).
#include "device_memory.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdlib>
#include <iterator>
#include <map>
#include <stdexcept>
#include <vector>

#include "cuda_check.h"

namespace ft::cuda {

void Fail(const char* call, const std::string& message) {
  throw std::runtime_error(std::string("GPU backend: ") + call + ": " + message);
}

namespace {
struct Range {
  uintptr_t end;
  char* device;
};
// by host start address
std::map<uintptr_t, Range>& Ranges() {
  static std::map<uintptr_t, Range> ranges;
  return ranges;
}
size_t heldBytes = 0;

struct ScratchBuffer {
  void* device = nullptr;
  size_t bytes = 0;
};
std::array<ScratchBuffer, static_cast<size_t>(Scratch::kCount)> scratch;
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

void* Mirror(const void* host, size_t bytes) {
  Device();
  auto& ranges = Ranges();
  const uintptr_t start = reinterpret_cast<uintptr_t>(host);
  const uintptr_t end = start + (bytes > 0 ? bytes : 1);
  auto after = ranges.upper_bound(start);
  if (after != ranges.begin()) {
    auto holder = std::prev(after);
    if (holder->first <= start && end <= holder->second.end) {
      return holder->second.device + (start - holder->first);
    }
  }
  // the union of every range overlapping [start, end)
  uintptr_t low = start, high = end;
  auto first = ranges.lower_bound(start);
  if (first != ranges.begin() && std::prev(first)->second.end > start) --first;
  auto last = first;
  while (last != ranges.end() && last->first < end) {
    low = std::min(low, last->first);
    high = std::max(high, last->second.end);
    ++last;
  }
  char* device = nullptr;
  FT_CUDA_CHECK(cudaMalloc(&device, high - low));
  FT_CUDA_CHECK(cudaMemset(device, 0, high - low));
  heldBytes += high - low;
  for (auto it = first; it != last; ++it) {
    const size_t length = it->second.end - it->first;
    FT_CUDA_CHECK(cudaMemcpy(device + (it->first - low), it->second.device, length, cudaMemcpyDeviceToDevice));
    FT_CUDA_CHECK(cudaFree(it->second.device));
    heldBytes -= length;
  }
  ranges.erase(first, last);
  ranges.emplace(low, Range{high, device});
  return device + (start - low);
}

void Upload(const void* host, const void* mirrored, size_t bytes) {
  if (bytes == 0) return;
  FT_CUDA_CHECK(cudaMemcpy(Mirror(mirrored, bytes), host, bytes, cudaMemcpyHostToDevice));
}

void Download(const void* mirrored, void* host, size_t bytes) {
  if (bytes == 0) return;
  FT_CUDA_CHECK(cudaMemcpy(host, Mirror(mirrored, bytes), bytes, cudaMemcpyDeviceToHost));
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
