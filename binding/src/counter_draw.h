// The counter-based draw of src/base/random.ts (hashKeys, uniform) for the CPU's and the GPU's
// kernels, from this one text: every draw a pure function of its keys, so that a shard's dropout
// mask is the same on any rank and any device.
#pragma once
#include <cstdint>

#ifdef __CUDACC__
#define FT_DRAW __host__ __device__ inline
#else
#define FT_DRAW inline
#endif

namespace ft {

// The running mix's start, before the first key.
constexpr uint32_t kDrawStart = 0x9e3779b9u;

// One key mixed in: murmur3's finalizer over the running value (uint32 arithmetic, as Math.imul's).
FT_DRAW uint32_t MixKey(uint32_t h, uint32_t key) {
  h = (h ^ key) * 0x85ebca6bu;
  h ^= h >> 13;
  h *= 0xc2b2ae35u;
  h ^= h >> 16;
  return h;
}

// uniform(keys..., i) in [0, 1), given the mix of keys...: exact in double (a 32-bit integer over 2^32).
FT_DRAW double DrawAt(uint32_t prefix, uint32_t i) { return MixKey(prefix, i) / 4294967296.0; }

}  // namespace ft
