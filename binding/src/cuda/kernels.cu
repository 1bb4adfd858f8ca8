// The GPU backend's own CUDA kernels; see kernels.h.
#include <algorithm>
#include <cfloat>

#include "cuda_check.h"
#include "device_memory.h"
#include "kernels.h"

namespace ft::cuda {

namespace {
constexpr int kThreads = 256;
// Values of one channel that one block of SumPerChannel sums: enough blocks to fill the GPU at
// large batches, a fixed split (and so fixed bits) at any.
constexpr size_t kChunk = 8192;

unsigned Blocks(size_t n) { return static_cast<unsigned>((n + kThreads - 1) / kThreads); }

// Kernels that divide indices are instantiated for 32-bit indices (below 2^31 values) as well: a 64-bit division costs a
// GPU tens of instructions, and it dominated the pooling and bias kernels. Same arithmetic on the
// values, so the same bits either way.
template <typename Launch>
void ByIndexWidth(size_t count, Launch launch) {
  if (count <= INT32_MAX) {
    launch(uint32_t{});
  } else {
    launch(size_t{});
  }
}

void Launched(const char* kernel) { Check(cudaGetLastError(), kernel); }

__global__ void ReluForwardKernel(const float* x, float* y, size_t n) {
  size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  if (i < n) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

__global__ void ReluBackwardKernel(const float* x, const float* dy, float* dx, size_t n) {
  size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  if (i < n) dx[i] = x[i] > 0.0f ? dy[i] : 0.0f;
}

__global__ void AddKernel(float* acc, const float* x, size_t n) {
  size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  if (i < n) acc[i] += x[i];
}

__global__ void ScaleKernel(float* x, float scale, size_t n) {
  size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  if (i < n) x[i] *= scale;
}

template <typename Index>
__global__ void AddBiasKernel(float* y, const float* b, Index channels, Index inner, Index n) {
  Index i = blockIdx.x * static_cast<Index>(blockDim.x) + threadIdx.x;
  if (i < n) y[i] += b[(i / inner) % channels];
}

// The sum of one channel's values [first, last) (k = o inner + i): each thread sums a fixed stride in
// order, then a fixed tree adds the threads' sums.
template <typename Index>
__device__ float ChannelSum(const float* dy, Index channels, Index inner, Index c, Index first, Index last) {
  __shared__ float partial[kThreads];
  float sum = 0.0f;
  for (Index k = first + threadIdx.x; k < last; k += kThreads) {
    Index o = k / inner, i = k % inner;
    sum += dy[(o * channels + c) * inner + i];
  }
  partial[threadIdx.x] = sum;
  __syncthreads();
  for (unsigned half = kThreads / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) partial[threadIdx.x] += partial[threadIdx.x + half];
    __syncthreads();
  }
  return partial[0];
}

// Block (c, chunk): channel c's chunk-th run of kChunk values into partials[c][chunk].
template <typename Index>
__global__ void ChunkSumsKernel(const float* dy, float* partials, Index outer, Index channels, Index inner) {
  const Index c = blockIdx.x, chunk = blockIdx.y, count = outer * inner;
  const Index first = chunk * static_cast<Index>(kChunk);
  const Index last = first + static_cast<Index>(kChunk) < count ? first + static_cast<Index>(kChunk) : count;
  float sum = ChannelSum(dy, channels, inner, c, first, last);
  if (threadIdx.x == 0) partials[c * gridDim.y + chunk] = sum;
}

// db[c] = channel c's chunk sums added in chunk order.
__global__ void ChannelTotalsKernel(const float* partials, float* db, size_t channels, size_t chunks) {
  size_t c = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  if (c >= channels) return;
  float sum = 0.0f;
  for (size_t k = 0; k < chunks; ++k) sum += partials[c * chunks + k];
  db[c] = sum;
}

__global__ void SoftmaxCrossEntropyKernel(const float* logits, const int32_t* labels, float* dlogits,
                                          double* rowLoss, size_t n, size_t classes) {
  size_t r = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  if (r >= n) return;
  const float* row = logits + r * classes;
  float* grad = dlogits + r * classes;
  double max = row[0];
  for (size_t j = 1; j < classes; ++j) max = fmax(max, static_cast<double>(row[j]));
  double sum = 0.0;
  for (size_t j = 0; j < classes; ++j) sum += exp(row[j] - max);
  const double logSum = log(sum);
  const int32_t label = labels[r];
  rowLoss[r] = logSum - (row[label] - max);
  for (size_t j = 0; j < classes; ++j) {
    double p = exp(row[j] - max - logSum);
    grad[j] = static_cast<float>((p - (static_cast<int32_t>(j) == label ? 1.0 : 0.0)) / n);
  }
}

// Where flat index i of [maps, rows, columns] is.
template <typename Index>
struct Place {
  Index map;
  int row, column;
};

template <typename Index>
__device__ Place<Index> Locate(Index i, int rows, int columns) {
  const Index line = i / static_cast<Index>(columns);
  return {line / static_cast<Index>(rows), static_cast<int>(line % static_cast<Index>(rows)),
          static_cast<int>(i - line * static_cast<Index>(columns))};
}

// one thread per output value
template <typename Index>
__global__ void MaxPoolForwardKernel(const float* x, float* y, int32_t* argmax, PoolGeometry g) {
  Index i = blockIdx.x * static_cast<Index>(blockDim.x) + threadIdx.x;
  Index total = static_cast<Index>(g.n) * g.c * g.oh * g.ow;
  if (i >= total) return;
  const auto [map, oy, ox] = Locate(i, g.oh, g.ow);
  const float* in = x + map * g.h * g.w;
  float best = -FLT_MAX;
  int at = -1;
  for (int ky = 0; ky < g.r; ++ky) {
    int iy = oy * g.stride - g.pad + ky;
    if (iy < 0 || iy >= g.h) continue;
    for (int kx = 0; kx < g.r; ++kx) {
      int ix = ox * g.stride - g.pad + kx;
      if (ix < 0 || ix >= g.w) continue;
      float v = in[iy * g.w + ix];
      if (at < 0 || v > best) {
        best = v;
        at = iy * g.w + ix;
      }
    }
  }
  y[i] = best;
  argmax[i] = at;
}

// The outputs whose windows hold input row (or column) `pos`: [first, last].
__device__ void Windows(int pos, int stride, int pad, int r, int out, int* first, int* last) {
  int low = pos + pad - r + 1;
  *first = low <= 0 ? 0 : (low + stride - 1) / stride;
  *last = min((pos + pad) / stride, out - 1);
}

// one thread per input value: gathers, in window order, the gradients of the outputs it was the max of
template <typename Index>
__global__ void MaxPoolBackwardKernel(const float* dy, float* dx, const int32_t* argmax, PoolGeometry g) {
  Index i = blockIdx.x * static_cast<Index>(blockDim.x) + threadIdx.x;
  Index total = static_cast<Index>(g.n) * g.c * g.h * g.w;
  if (i >= total) return;
  const auto [map, iy, ix] = Locate(i, g.h, g.w);
  const int self = iy * g.w + ix;
  int y0, y1, x0, x1;
  Windows(iy, g.stride, g.pad, g.r, g.oh, &y0, &y1);
  Windows(ix, g.stride, g.pad, g.r, g.ow, &x0, &x1);
  float sum = 0.0f;
  for (int oy = y0; oy <= y1; ++oy) {
    for (int ox = x0; ox <= x1; ++ox) {
      Index o = (map * g.oh + oy) * g.ow + ox;
      if (argmax[o] == self) sum += dy[o];
    }
  }
  dx[i] = sum;
}

template <typename Index>
__global__ void AvgPoolForwardKernel(const float* x, float* y, PoolGeometry g) {
  Index i = blockIdx.x * static_cast<Index>(blockDim.x) + threadIdx.x;
  Index total = static_cast<Index>(g.n) * g.c * g.oh * g.ow;
  if (i >= total) return;
  const auto [map, oy, ox] = Locate(i, g.oh, g.ow);
  const float* in = x + map * g.h * g.w;
  float sum = 0.0f;
  for (int ky = 0; ky < g.r; ++ky) {
    int iy = oy * g.stride - g.pad + ky;
    if (iy < 0 || iy >= g.h) continue;
    for (int kx = 0; kx < g.r; ++kx) {
      int ix = ox * g.stride - g.pad + kx;
      if (ix >= 0 && ix < g.w) sum += in[iy * g.w + ix];
    }
  }
  y[i] = sum / static_cast<float>(g.r * g.r);
}

template <typename Index>
__global__ void AvgPoolBackwardKernel(const float* dy, float* dx, PoolGeometry g) {
  Index i = blockIdx.x * static_cast<Index>(blockDim.x) + threadIdx.x;
  Index total = static_cast<Index>(g.n) * g.c * g.h * g.w;
  if (i >= total) return;
  const auto [map, iy, ix] = Locate(i, g.h, g.w);
  int y0, y1, x0, x1;
  Windows(iy, g.stride, g.pad, g.r, g.oh, &y0, &y1);
  Windows(ix, g.stride, g.pad, g.r, g.ow, &x0, &x1);
  float sum = 0.0f;
  for (int oy = y0; oy <= y1; ++oy) {
    for (int ox = x0; ox <= x1; ++ox) sum += dy[(map * g.oh + oy) * g.ow + ox];
  }
  dx[i] = sum / static_cast<float>(g.r * g.r);
}
}  // namespace

void ReluForward(const float* x, float* y, size_t n) {
  if (n == 0) return;
  ReluForwardKernel<<<Blocks(n), kThreads>>>(x, y, n);
  Launched("reluForward");
}

void ReluBackward(const float* x, const float* dy, float* dx, size_t n) {
  if (n == 0) return;
  ReluBackwardKernel<<<Blocks(n), kThreads>>>(x, dy, dx, n);
  Launched("reluBackward");
}

void AddInPlace(float* acc, const float* x, size_t n) {
  if (n == 0) return;
  AddKernel<<<Blocks(n), kThreads>>>(acc, x, n);
  Launched("addInPlace");
}

void ScaleInPlace(float* x, float scale, size_t n) {
  if (n == 0) return;
  ScaleKernel<<<Blocks(n), kThreads>>>(x, scale, n);
  Launched("scaleInPlace");
}

void AddBias(float* y, const float* b, size_t outer, size_t channels, size_t inner) {
  size_t n = outer * channels * inner;
  if (n == 0) return;
  ByIndexWidth(n, [&](auto index) {
    using Index = decltype(index);
    AddBiasKernel<Index><<<Blocks(n), kThreads>>>(y, b, channels, inner, n);
  });
  Launched("addBias");
}

void SumPerChannel(const float* dy, float* db, size_t outer, size_t channels, size_t inner) {
  if (channels == 0) return;
  const size_t chunks = std::max<size_t>(1, (outer * inner + kChunk - 1) / kChunk);
  auto* partials = static_cast<float*>(ScratchOf(Scratch::kPartials, channels * chunks * sizeof(float)));
  ByIndexWidth(outer * channels * inner, [&](auto index) {
    using Index = decltype(index);
    ChunkSumsKernel<Index><<<dim3(static_cast<unsigned>(channels), static_cast<unsigned>(chunks)), kThreads>>>(
        dy, partials, outer, channels, inner);
  });
  Launched("sumPerChannel");
  ChannelTotalsKernel<<<Blocks(channels), kThreads>>>(partials, db, channels, chunks);
  Launched("sumPerChannel");
}

void SoftmaxCrossEntropy(const float* logits, const int32_t* labels, float* dlogits, double* rowLoss,
                         size_t n, size_t classes) {
  if (n == 0) return;
  SoftmaxCrossEntropyKernel<<<Blocks(n), kThreads>>>(logits, labels, dlogits, rowLoss, n, classes);
  Launched("softmaxCrossEntropy");
}

void MaxPoolForward(const float* x, float* y, int32_t* argmax, const PoolGeometry& g) {
  size_t n = static_cast<size_t>(g.n) * g.c * g.oh * g.ow;
  ByIndexWidth(n, [&](auto index) { MaxPoolForwardKernel<decltype(index)><<<Blocks(n), kThreads>>>(x, y, argmax, g); });
  Launched("pool2dForward");
}

void MaxPoolBackward(const float* dy, float* dx, const int32_t* argmax, const PoolGeometry& g) {
  size_t n = static_cast<size_t>(g.n) * g.c * g.h * g.w;
  ByIndexWidth(n, [&](auto index) { MaxPoolBackwardKernel<decltype(index)><<<Blocks(n), kThreads>>>(dy, dx, argmax, g); });
  Launched("pool2dBackward");
}

void AvgPoolForward(const float* x, float* y, const PoolGeometry& g) {
  size_t n = static_cast<size_t>(g.n) * g.c * g.oh * g.ow;
  ByIndexWidth(n, [&](auto index) { AvgPoolForwardKernel<decltype(index)><<<Blocks(n), kThreads>>>(x, y, g); });
  Launched("pool2dForward");
}

void AvgPoolBackward(const float* dy, float* dx, const PoolGeometry& g) {
  size_t n = static_cast<size_t>(g.n) * g.c * g.h * g.w;
  ByIndexWidth(n, [&](auto index) { AvgPoolBackwardKernel<decltype(index)><<<Blocks(n), kThreads>>>(dy, dx, g); });
  Launched("pool2dBackward");
}

}  // namespace ft::cuda
