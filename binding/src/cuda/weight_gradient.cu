// A convolution's weight gradient computed by the addon, for convolutions whose filters see few
// input values (C R S <= kFewInputs: a first layer over an image's channels). There dw is small and
// its sums are long (every output position of every sample), and cuDNN's deterministic algorithms
// do badly: on an H100, cifarnet's first layer at batch 512 (3 x 5 x 5 inputs, 32 filters) took
// about 1 ms by FFT, against 0.19 ms for cuDNN's non-deterministic choice. Here the sums are split
// into fixed runs of output positions, each run's partial sums computed by one block as a small
// matrix product (implicit im2col), then the runs' partials added in a fixed order: a split fixed by
// the shape alone, so the same bits on every rank and every run.
#include <algorithm>
#include <cstdint>

#include "cuda_check.h"
#include "device_memory.h"
#include "kernels.h"

namespace ft::cuda {

namespace {
// A block's tile: kTile filters x all the weights of each (kTile wide slices, at most
// kFewInputs / kTile of them), kTile output positions at a time.
constexpr int kTile = 32;
constexpr int kThreads = 256;
constexpr int kMaxSlices = kFewInputs / kTile;
// Output positions (sample, y, x) whose products one block sums: enough blocks to fill a GPU.
constexpr size_t kPositionsPerRun = 512;
// At most this many partial sums are kept (runs x filters x weights), and at most kMaxRuns runs (a
// grid's third dimension): longer runs past either.
constexpr size_t kMaxPartials = size_t{1} << 24;
constexpr size_t kMaxRuns = 65535;

struct Geometry {
  ConvGeometry conv;
  size_t positionsPerRun;
};

// Block (filter tile, run), weights in kSlices slices of kTile: partials[run][k][j] = the sum over
// the run's positions q = (n, oy, ox) of dy[n, k, oy, ox] x[n, c, oy stride - pad + r, ox stride -
// pad + s], j = (c, r, s), each thread summing its 2 filters x 2 kSlices weights in position order.
template <typename Index, int kSlices>
__global__ void WeightPartialsKernel(const float* x, const float* dy, float* partials, Geometry geometry) {
  constexpr int kWidth = kSlices * kTile;
  __shared__ float dyTile[kTile][kTile + 1];    // [filter][position]
  __shared__ float colTile[kTile][kWidth + 1];  // [position][weight]
  const ConvGeometry& g = geometry.conv;
  const Index outputs = static_cast<Index>(g.oh) * g.ow;
  const int weights = g.c * g.r * g.s;
  const Index positions = static_cast<Index>(g.n) * outputs;
  const Index k0 = blockIdx.y * kTile;
  const Index first = blockIdx.z * static_cast<Index>(geometry.positionsPerRun);
  const Index last = min(first + static_cast<Index>(geometry.positionsPerRun), positions);
  // the tiles' loads: this thread's position column (fixed) and its rows (filters; weights)
  constexpr int kRowStep = kThreads / kTile, kFilterRows = kTile / kRowStep, kWeightRows = kWidth / kRowStep;
  const int column = threadIdx.x % kTile, row = threadIdx.x / kTile;
  int weightC[kWeightRows], weightR[kWeightRows], weightS[kWeightRows];  // weightC -1: past the last
  for (int i = 0; i < kWeightRows; ++i) {
    const int j = row + i * kRowStep;
    weightC[i] = j < weights ? j / (g.r * g.s) : -1;
    weightR[i] = j % (g.r * g.s) / g.s;
    weightS[i] = j % g.s;
  }
  // the products: this thread's filters ty and ty + kTile / 2, weights tx + b kTile / 2
  constexpr int kHalf = kTile / 2, kColumns = 2 * kSlices;
  const int ty = threadIdx.x / kHalf, tx = threadIdx.x % kHalf;
  float sum[2][kColumns] = {};
  for (Index q0 = first; q0 < last; q0 += kTile) {
    const Index q = q0 + column;
    const bool inside = q < last;
    const Index n = inside ? q / outputs : 0, p = inside ? q % outputs : 0;
    const int iy0 = static_cast<int>(p / g.ow) * g.stride - g.pad, ix0 = static_cast<int>(p % g.ow) * g.stride - g.pad;
    const float* xs = x + n * g.c * g.h * g.w;
    for (int i = 0; i < kFilterRows; ++i) {
      const Index k = k0 + row + i * kRowStep;
      dyTile[row + i * kRowStep][column] = inside && k < static_cast<Index>(g.k) ? dy[(n * g.k + k) * outputs + p] : 0.0f;
    }
    for (int i = 0; i < kWeightRows; ++i) {
      const int iy = iy0 + weightR[i], ix = ix0 + weightS[i];
      const bool within = inside && weightC[i] >= 0 && iy >= 0 && iy < g.h && ix >= 0 && ix < g.w;
      colTile[column][row + i * kRowStep] = within ? xs[(static_cast<Index>(weightC[i]) * g.h + iy) * g.w + ix] : 0.0f;
    }
    __syncthreads();
    for (int t = 0; t < kTile; ++t) {
      const float d0 = dyTile[ty][t], d1 = dyTile[ty + kHalf][t];
      for (int b = 0; b < kColumns; ++b) {
        const float xv = colTile[t][tx + b * kHalf];
        sum[0][b] += d0 * xv;
        sum[1][b] += d1 * xv;
      }
    }
    __syncthreads();
  }
  float* out = partials + static_cast<size_t>(blockIdx.z) * g.k * weights;
  for (int a = 0; a < 2; ++a) {
    for (int b = 0; b < kColumns; ++b) {
      const Index k = k0 + ty + a * kHalf;
      const int j = tx + b * kHalf;
      if (k < static_cast<Index>(g.k) && j < weights) out[k * weights + j] = sum[a][b];
    }
  }
}

// dw[i] = the runs' partials of weight i added in a fixed order, a warp per weight: lane l adds
// runs l, l + 32, ... in order (in double), then lane 0 adds the lanes' sums in lane order.
__global__ void AddRunsKernel(const float* partials, float* dw, size_t count, size_t runs) {
  const size_t i = blockIdx.x * static_cast<size_t>(blockDim.x / 32) + threadIdx.x / 32;
  if (i >= count) return;  // a whole warp
  const unsigned lane = threadIdx.x % 32;
  double sum = 0.0;
  for (size_t run = lane; run < runs; run += 32) sum += partials[run * count + i];
  double total = 0.0;
  for (int from = 0; from < 32; ++from) total += __shfl_sync(0xffffffffu, sum, from);
  if (lane == 0) dw[i] = static_cast<float>(total);
}

template <typename Index>
void LaunchPartials(const float* x, const float* dy, float* partials, const Geometry& geometry, dim3 grid, int slices) {
  switch (slices) {
    case 1: WeightPartialsKernel<Index, 1><<<grid, kThreads>>>(x, dy, partials, geometry); break;
    case 2: WeightPartialsKernel<Index, 2><<<grid, kThreads>>>(x, dy, partials, geometry); break;
    case 3: WeightPartialsKernel<Index, 3><<<grid, kThreads>>>(x, dy, partials, geometry); break;
    default: WeightPartialsKernel<Index, kMaxSlices><<<grid, kThreads>>>(x, dy, partials, geometry); break;
  }
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
  const dim3 grid(1, static_cast<unsigned>((g.k + kTile - 1) / kTile), static_cast<unsigned>(runs));
  const Geometry geometry{g, runLength};
  const int slices = static_cast<int>((weights + kTile - 1) / kTile);
  const size_t largest = std::max(static_cast<size_t>(g.n) * g.c * g.h * g.w, positions * g.k);
  if (largest <= INT32_MAX) {
    LaunchPartials<uint32_t>(x, dy, partials, geometry, grid, slices);
  } else {
    LaunchPartials<size_t>(x, dy, partials, geometry, grid, slices);
  }
  Check(cudaGetLastError(), "conv2dBackwardWeights");
  constexpr unsigned kWarps = kThreads / 32;
  AddRunsKernel<<<static_cast<unsigned>((count + kWarps - 1) / kWarps), kThreads>>>(partials, dw, count, runs);
  Check(cudaGetLastError(), "conv2dBackwardWeights");
}

}  // namespace ft::cuda
