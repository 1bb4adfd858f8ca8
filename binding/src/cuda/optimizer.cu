// The optimizers' updates as CUDA kernels: one thread per element, the arithmetic of
// optimizer_math.h (shared with the CPU kernels), built with --fmad=false (CMakeLists.txt) so that
// no multiply-add is fused: the same bits as the CPU backend's updates.
#include "cuda_check.h"
#include "kernels.h"
#include "optimizer_math.h"

namespace ft::cuda {

namespace {
constexpr int kThreads = 256;

unsigned Blocks(size_t n) { return static_cast<unsigned>((n + kThreads - 1) / kThreads); }

__device__ size_t Element() { return blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; }

__global__ void SgdUpdateKernel(const float* p, const float* g, const float* v, float* pOut, float* vOut, SgdScalars s, size_t n) {
  size_t i = Element();
  if (i >= n) return;
  float param = p[i];
  float velocity = SgdVelocity(s, v[i], SgdMomentumInput(s, param, g[i]));
  vOut[i] = velocity;
  pOut[i] = SgdParam(s, param, velocity);
}

__global__ void SgdStateInputKernel(const float* p, const float* g, float* input, SgdScalars s, size_t n) {
  size_t i = Element();
  if (i < n) input[i] = SgdMomentumInput(s, p[i], g[i]);
}

__global__ void SgdReplayKernel(float* v, const float* input, SgdScalars s, size_t n) {
  size_t i = Element();
  if (i < n) v[i] = SgdVelocity(s, v[i], input[i]);
}

__global__ void AdamwUpdateKernel(const float* p, const float* g, const float* m, const float* v, float* pOut, float* mOut,
                                  float* vOut, AdamwScalars s, size_t n) {
  size_t i = Element();
  if (i >= n) return;
  float first = m[i], second = v[i];
  pOut[i] = AdamwParam(s, p[i], first, second, g[i]);
  mOut[i] = first;
  vOut[i] = second;
}

__global__ void AdamwReplayKernel(float* m, float* v, const float* g, AdamMoments a, size_t n) {
  size_t i = Element();
  if (i < n) AdamAdvance(a, m[i], v[i], g[i]);
}

void Launched(const char* kernel) { Check(cudaGetLastError(), kernel); }
}  // namespace

void SgdUpdate(const float* p, const float* g, const float* v, float* pOut, float* vOut, const SgdScalars& s, size_t n) {
  if (n == 0) return;
  SgdUpdateKernel<<<Blocks(n), kThreads>>>(p, g, v, pOut, vOut, s, n);
  Launched("sgdUpdate");
}

void SgdStateInput(const float* p, const float* g, float* input, const SgdScalars& s, size_t n) {
  if (n == 0) return;
  SgdStateInputKernel<<<Blocks(n), kThreads>>>(p, g, input, s, n);
  Launched("sgdStateInput");
}

void SgdReplay(float* v, const float* input, const SgdScalars& s, size_t n) {
  if (n == 0) return;
  SgdReplayKernel<<<Blocks(n), kThreads>>>(v, input, s, n);
  Launched("sgdReplay");
}

void AdamwUpdate(const float* p, const float* g, const float* m, const float* v, float* pOut, float* mOut, float* vOut,
                 const AdamwScalars& s, size_t n) {
  if (n == 0) return;
  AdamwUpdateKernel<<<Blocks(n), kThreads>>>(p, g, m, v, pOut, mOut, vOut, s, n);
  Launched("adamwUpdate");
}

void AdamwReplay(float* m, float* v, const float* g, const AdamMoments& a, size_t n) {
  if (n == 0) return;
  AdamwReplayKernel<<<Blocks(n), kThreads>>>(m, v, g, a, n);
  Launched("adamwReplay");
}

}  // namespace ft::cuda
