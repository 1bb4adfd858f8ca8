// A convolution's weight gradient computed by the addon, for convolutions whose filters see few
// input values (C R S <= kFewInputs: a first layer over an image's channels). There dw is small and
// its sums are long (every output position of every sample), and cuDNN's deterministic algorithms
// do badly: on an H100, cifarnet's first layer at batch 512 (3 x 5 x 5 inputs, 32 filters) took
// about 1 ms by FFT, against 0.19 ms for cuDNN's non-deterministic choice. Here the sums are split
// into fixed runs of output positions, each run's partial sums computed by one block as a small
// matrix product (implicit im2col), then the runs' partials added in run order: a split fixed by the
// shape alone, so the same bits on every rank and every run.
#include <algorithm>
#include <cstdint>

#include "cuda_check.h"
#include "device_memory.h"
#include "kernels.h"

namespace ft::cuda {

namespace {
// A block's tile: kTile filters x kTile weights of each, kTile output positions at a time.
constexpr int kTile = 32;
constexpr int kThreads = 256;
// Output positions (sample, y, x) whose products one block sums: enough blocks to fill a GPU.
constexpr size_t kPositionsPerRun = 1024;
// At most this many partial sums are kept (runs x filters x weights), and at most kMaxRuns runs (a
// grid's third dimension): longer runs past either.
constexpr size_t kMaxPartials = size_t{1} << 24;
constexpr size_t kMaxRuns = 65535;

struct Geometry {
  ConvGeometry conv;
  size_t positionsPerRun;
};

// Block (weight tile, filter tile, run): partials[run][k][j] = the sum over the run's positions q =
// (n, oy, ox) of dy[n, k, oy, ox] x[n, c, oy stride - pad + r, ox stride - pad + s], j = (c, r, s),
// each thread summing its 2 x 2 outputs in position order.
template <typename Index>
__global__ void WeightPartialsKernel(const float* x, const float* dy, float* partials, Geometry geometry) {
  __shared__ float dyTile[kTile][kTile + 1];   // [filter][position]
  __shared__ float colTile[kTile][kTile + 1];  // [position][weight]
  const ConvGeometry& g = geometry.conv;
  const Index outputs = static_cast<Index>(g.oh) * g.ow;
  const Index weights = static_cast<Index>(g.c) * g.r * g.s;
  const Index positions = static_cast<Index>(g.n) * outputs;
  const Index j0 = blockIdx.x * kTile, k0 = blockIdx.y * kTile;
  const Index first = blockIdx.z * static_cast<Index>(geometry.positionsPerRun);
  const Index last = min(first + static_cast<Index>(geometry.positionsPerRun), positions);
  // the tiles' loads: this thread's position column (fixed) and its rows (filters, weights)
  const int column = threadIdx.x % kTile, row = threadIdx.x / kTile;
  constexpr int kRowsPerThread = kTile * kTile / kThreads;
  int weightC[kRowsPerThread], weightR[kRowsPerThread], weightS[kRowsPerThread];  // weightC -1: past the last
  for (int i = 0; i < kRowsPerThread; ++i) {
    const int j = static_cast<int>(j0) + row + i * (kThreads / kTile);
    weightC[i] = j < static_cast<int>(weights) ? j / (g.r * g.s) : -1;
    weightR[i] = j % (g.r * g.s) / g.s;
    weightS[i] = j % g.s;
  }
  // the products: this thread's two filters and two weights
  const int ty = threadIdx.x / (kTile / 2), tx = threadIdx.x % (kTile / 2);
  float sum[2][2] = {{0.0f, 0.0f}, {0.0f, 0.0f}};
  for (Index q0 = first; q0 < last; q0 += kTile) {
    const Index q = q0 + column;
    const bool inside = q < last;
    const Index n = inside ? q / outputs : 0, p = inside ? q % outputs : 0;
    const int iy0 = static_cast<int>(p / g.ow) * g.stride - g.pad, ix0 = static_cast<int>(p % g.ow) * g.stride - g.pad;
    const float* xs = x + n * g.c * g.h * g.w;
    for (int i = 0; i < kRowsPerThread; ++i) {
      const int r = row + i * (kThreads / kTile);
      const Index k = k0 + r;
      dyTile[r][column] = inside && k < static_cast<Index>(g.k) ? dy[(n * g.k + k) * outputs + p] : 0.0f;
      const int iy = iy0 + weightR[i], ix = ix0 + weightS[i];
      const bool within = inside && weightC[i] >= 0 && iy >= 0 && iy < g.h && ix >= 0 && ix < g.w;
      colTile[column][r] = within ? xs[(static_cast<Index>(weightC[i]) * g.h + iy) * g.w + ix] : 0.0f;
    }
    __syncthreads();
    for (int t = 0; t < kTile; ++t) {
      const float d0 = dyTile[ty][t], d1 = dyTile[ty + kTile / 2][t];
      const float x0 = colTile[t][tx], x1 = colTile[t][tx + kTile / 2];
      sum[0][0] += d0 * x0;
      sum[0][1] += d0 * x1;
      sum[1][0] += d1 * x0;
      sum[1][1] += d1 * x1;
    }
    __syncthreads();
  }
  float* out = partials + static_cast<size_t>(blockIdx.z) * g.k * weights;
  for (int a = 0; a < 2; ++a) {
    for (int b = 0; b < 2; ++b) {
      const Index k = k0 + ty + a * (kTile / 2), j = j0 + tx + b * (kTile / 2);
      if (k < static_cast<Index>(g.k) && j < weights) out[k * weights + j] = sum[a][b];
    }
  }
}

// dw[i] = the runs' partials of weight i added in run order (in double).
__global__ void AddRunsKernel(const float* partials, float* dw, size_t count, size_t runs) {
  const size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  if (i >= count) return;
  // loads kBatch runs ahead of the adds: a thread's loads would otherwise wait on each other
  constexpr size_t kBatch = 8;
  double sum = 0.0;
  size_t run = 0;
  for (; run + kBatch <= runs; run += kBatch) {
    float values[kBatch];
    for (size_t b = 0; b < kBatch; ++b) values[b] = partials[(run + b) * count + i];
    for (size_t b = 0; b < kBatch; ++b) sum += values[b];
  }
  for (; run < runs; ++run) sum += partials[run * count + i];
  dw[i] = static_cast<float>(sum);
}
}  // namespace

bool OwnWeightGradient(const ConvGeometry& g) { return static_cast<size_t>(g.c) * g.r * g.s <= kFewInputs; }

void ConvWeightGradient(const float* x, const float* dy, float* dw, const ConvGeometry& g) {
  const size_t weights = static_cast<size_t>(g.c) * g.r * g.s, count = weights * g.k;
  const size_t positions = static_cast<size_t>(g.n) * g.oh * g.ow;
  if (count == 0) return;
  // runs of kPositionsPerRun positions, longer where there would be too many
  const size_t maxRuns = std::max<size_t>(1, std::min(kMaxRuns, kMaxPartials / count));
  const size_t runLength = std::max(kPositionsPerRun, (positions + maxRuns - 1) / maxRuns);
  const size_t runs = std::max<size_t>(1, (positions + runLength - 1) / runLength);
  auto* partials = static_cast<float*>(ScratchOf(Scratch::kWeightPartials, runs * count * sizeof(float)));
  const dim3 grid(static_cast<unsigned>((weights + kTile - 1) / kTile), static_cast<unsigned>((g.k + kTile - 1) / kTile),
                  static_cast<unsigned>(runs));
  const Geometry geometry{g, runLength};
  const size_t largest = std::max(static_cast<size_t>(g.n) * g.c * g.h * g.w, positions * g.k);
  if (largest <= INT32_MAX) {
    WeightPartialsKernel<uint32_t><<<grid, kThreads>>>(x, dy, partials, geometry);
  } else {
    WeightPartialsKernel<size_t><<<grid, kThreads>>>(x, dy, partials, geometry);
  }
  Check(cudaGetLastError(), "conv2dBackwardWeights");
  AddRunsKernel<<<static_cast<unsigned>((count + kThreads - 1) / kThreads), kThreads>>>(partials, dw, count, runs);
  Check(cudaGetLastError(), "conv2dBackwardWeights");
}

}  // namespace ft::cuda
