// Batch normalisation and global average pooling as CUDA kernels, over plain [N, C, S] activations.
// Batchnorm's per-channel sums run in double in a fixed order: each block sums a fixed run of
// kChunk values of one channel (each thread a fixed stride in order, then a fixed tree), and one
// thread per channel adds the runs in order, so the same inputs give the same bits (other bits than
// the CPU's one chain per channel). Global average pooling sums each map in order in double, as the
// CPU does: the same bits as the CPU's.
#include <algorithm>
#include <cmath>

#include "cuda_check.h"
#include "device_memory.h"
#include "kernels.h"

namespace ft::cuda {

namespace {
constexpr int kThreads = 256;
// Values of one channel that one block sums (as kernels.cu's per-channel sums).
constexpr size_t kChunk = 8192;

unsigned Blocks(size_t n) { return static_cast<unsigned>((n + kThreads - 1) / kThreads); }

void Launched(const char* kernel) { Check(cudaGetLastError(), kernel); }

// Element k (in [0, N S)) of channel c of [N, C, S].
__device__ size_t At(const NormGeometry& g, size_t c, size_t k) { return (k / g.s * g.c + c) * g.s + k % g.s; }

// The terms each pass sums: one or two doubles per value at index i of channel c.
struct ValueTerm {
  const float* x;
  __device__ double2 operator()(size_t i, size_t) const { return {x[i], 0.0}; }
};
struct SquareTerm {
  const float* x;
  const double* mean;
  __device__ double2 operator()(size_t i, size_t c) const {
    double centred = x[i] - mean[c];
    return {centred * centred, 0.0};
  }
};
struct GradientTerm {
  const float* dy;
  const float* xhat;
  __device__ double2 operator()(size_t i, size_t) const { return {dy[i], static_cast<double>(dy[i]) * xhat[i]}; }
};

// Block (c, chunk): the sums of channel c's chunk-th run of kChunk values into partials[c][chunk].
template <typename Term>
__global__ void ChunkSumsKernel(Term term, double2* partials, NormGeometry g) {
  __shared__ double2 partial[kThreads];
  const size_t c = blockIdx.x, chunk = blockIdx.y, count = g.n * g.s;
  const size_t first = chunk * kChunk, last = first + kChunk < count ? first + kChunk : count;
  double2 sum{0.0, 0.0};
  for (size_t k = first + threadIdx.x; k < last; k += kThreads) {
    double2 t = term(At(g, c, k), c);
    sum.x += t.x;
    sum.y += t.y;
  }
  partial[threadIdx.x] = sum;
  __syncthreads();
  for (unsigned half = kThreads / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) {
      partial[threadIdx.x].x += partial[threadIdx.x + half].x;
      partial[threadIdx.x].y += partial[threadIdx.x + half].y;
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) partials[c * gridDim.y + chunk] = partial[0];
}

// totals[c] = channel c's run sums added in run order.
__global__ void ChannelTotalsKernel(const double2* partials, double2* totals, size_t channels, size_t chunks) {
  size_t c = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  if (c >= channels) return;
  double2 sum{0.0, 0.0};
  for (size_t k = 0; k < chunks; ++k) {
    sum.x += partials[c * chunks + k].x;
    sum.y += partials[c * chunks + k].y;
  }
  totals[c] = sum;
}

__global__ void MeanKernel(const double2* totals, double* mean, NormGeometry g) {
  size_t c = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  if (c < g.c) mean[c] = totals[c].x / static_cast<double>(g.n * g.s);
}

__global__ void VarianceKernel(const double2* totals, double* unbiased, double* invStd, double eps, NormGeometry g) {
  size_t c = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  if (c >= g.c) return;
  const size_t values = g.n * g.s;
  const double squares = totals[c].x;
  unbiased[c] = values > 1 ? squares / static_cast<double>(values - 1) : 0.0;
  invStd[c] = 1.0 / sqrt(squares / static_cast<double>(values) + eps);
}

__global__ void NormaliseKernel(const float* x, const float* w, const float* b, const double* mean, const double* invStd,
                                float* y, float* xhat, NormGeometry g) {
  size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  if (i >= g.n * g.c * g.s) return;
  size_t c = i / g.s % g.c;
  float normalised = static_cast<float>((x[i] - mean[c]) * invStd[c]);
  xhat[i] = normalised;
  y[i] = static_cast<float>(static_cast<double>(normalised) * w[c] + b[c]);
}

__global__ void EvalKernel(const float* x, const float* w, const float* b, const float* runningMean, const float* runningVar,
                           float* y, double eps, NormGeometry g) {
  size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  if (i >= g.n * g.c * g.s) return;
  size_t c = i / g.s % g.c;
  double scale = w[c] / sqrt(runningVar[c] + eps);
  y[i] = static_cast<float>((x[i] - static_cast<double>(runningMean[c])) * scale + b[c]);
}

__global__ void GradientTotalsKernel(const double2* totals, float* dw, float* db, NormGeometry g) {
  size_t c = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  if (c >= g.c) return;
  db[c] = static_cast<float>(totals[c].x);
  dw[c] = static_cast<float>(totals[c].y);
}

__global__ void InputGradientKernel(const float* dy, const float* xhat, const float* w, const double* invStd,
                                    const double2* totals, float* dx, NormGeometry g) {
  size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  if (i >= g.n * g.c * g.s) return;
  size_t c = i / g.s % g.c;
  const double values = static_cast<double>(g.n * g.s);
  double scale = w[c] * invStd[c];
  dx[i] = static_cast<float>(scale * (dy[i] - totals[c].x / values - xhat[i] * (totals[c].y / values)));
}

__global__ void GlobalAvgPoolForwardKernel(const float* x, float* y, NormGeometry g) {
  size_t map = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  if (map >= g.n * g.c) return;
  double sum = 0.0;
  for (size_t s = 0; s < g.s; ++s) sum += x[map * g.s + s];
  y[map] = static_cast<float>(sum / static_cast<double>(g.s));
}

__global__ void GlobalAvgPoolBackwardKernel(const float* dy, float* dx, NormGeometry g) {
  size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  if (i < g.n * g.c * g.s) dx[i] = static_cast<float>(static_cast<double>(dy[i / g.s]) / static_cast<double>(g.s));
}

// Every channel's sums of `term` into the device's per-channel totals (scratch), in the fixed order above.
template <typename Term>
double2* ChannelSums(Term term, const NormGeometry& g, const char* kernel) {
  const size_t chunks = std::max<size_t>(1, (g.n * g.s + kChunk - 1) / kChunk);
  auto* partials = static_cast<double2*>(ScratchOf(Scratch::kPartials, g.c * chunks * sizeof(double2)));
  auto* totals = static_cast<double2*>(ScratchOf(Scratch::kChannelTotals, g.c * sizeof(double2)));
  ChunkSumsKernel<<<dim3(static_cast<unsigned>(g.c), static_cast<unsigned>(chunks)), kThreads>>>(term, partials, g);
  Launched(kernel);
  ChannelTotalsKernel<<<Blocks(g.c), kThreads>>>(partials, totals, g.c, chunks);
  Launched(kernel);
  return totals;
}
}  // namespace

void BatchnormForwardTrain(const float* x, const float* w, const float* b, float* y, float* xhat, double* mean,
                           double* unbiased, double* invStd, double eps, const NormGeometry& g) {
  if (g.n * g.c * g.s == 0) return;
  const char* kernel = "batchnormForwardTrain";
  MeanKernel<<<Blocks(g.c), kThreads>>>(ChannelSums(ValueTerm{x}, g, kernel), mean, g);
  Launched(kernel);
  VarianceKernel<<<Blocks(g.c), kThreads>>>(ChannelSums(SquareTerm{x, mean}, g, kernel), unbiased, invStd, eps, g);
  Launched(kernel);
  NormaliseKernel<<<Blocks(g.n * g.c * g.s), kThreads>>>(x, w, b, mean, invStd, y, xhat, g);
  Launched(kernel);
}

void BatchnormForwardEval(const float* x, const float* w, const float* b, const float* runningMean, const float* runningVar,
                          float* y, double eps, const NormGeometry& g) {
  if (g.n * g.c * g.s == 0) return;
  EvalKernel<<<Blocks(g.n * g.c * g.s), kThreads>>>(x, w, b, runningMean, runningVar, y, eps, g);
  Launched("batchnormForwardEval");
}

void BatchnormBackward(const float* dy, const float* xhat, const float* w, const double* invStd, float* dx, float* dw,
                       float* db, const NormGeometry& g) {
  const char* kernel = "batchnormBackward";
  if (g.c == 0) return;
  const double2* totals = ChannelSums(GradientTerm{dy, xhat}, g, kernel);
  GradientTotalsKernel<<<Blocks(g.c), kThreads>>>(totals, dw, db, g);
  Launched(kernel);
  if (dx == nullptr || g.n * g.s == 0) return;
  InputGradientKernel<<<Blocks(g.n * g.c * g.s), kThreads>>>(dy, xhat, w, invStd, totals, dx, g);
  Launched(kernel);
}

void GlobalAvgPoolForward(const float* x, float* y, const NormGeometry& g) {
  if (g.n * g.c == 0) return;
  GlobalAvgPoolForwardKernel<<<Blocks(g.n * g.c), kThreads>>>(x, y, g);
  Launched("globalAvgPoolForward");
}

void GlobalAvgPoolBackward(const float* dy, float* dx, const NormGeometry& g) {
  if (g.n * g.c * g.s == 0) return;
  GlobalAvgPoolBackwardKernel<<<Blocks(g.n * g.c * g.s), kThreads>>>(dy, dx, g);
  Launched("globalAvgPoolBackward");
}

}  // namespace ft::cuda
