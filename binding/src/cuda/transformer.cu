// The kernels a GPT-style transformer adds, as CUDA kernels: causal multi-head self-attention, the
// exact GELU, layernorm, token + position embedding, and dropout's counter-based mask. Attention's
// products go to cuBLAS (dnn.h's BatchedGemm); every other output is computed by one thread or one
// warp in a fixed order, or from fixed chunks added in order, so the same inputs give the same bits
// (the one atomic, the first bad token's position, is a minimum: the same in any order). Where the
// CPU's kernel is one chain of IEEE operations the GPU's is the same chain (built with --fmad=false,
// fast_math.h's exp and erfc, counter_draw.h's draw): GELU, the softmax's probabilities given the
// same scores, the embedding, its gradients and the dropout mask have the CPU's bits. The products
// sum in cuBLAS's order, the CPU's in OpenBLAS's: within rounding, not the same bits.
#include <algorithm>
#include <climits>
#include <cmath>

#include "counter_draw.h"
#include "cuda_check.h"
#include "device_memory.h"
#include "dnn.h"
#include "fast_math.h"
#include "kernels.h"

namespace ft::cuda {

namespace {
constexpr int kThreads = 256;
// Rows of a layernorm's gradient that one thread sums per column (a fixed split: fixed bits), few
// enough that the chunks' threads fill the GPU.
constexpr size_t kRowChunk = 32;
// A block's most threads: the token table's gradient takes a row's values a thread each, up to this.
constexpr int kMaxThreads = 1024;
// Token ids one block of the token table's gradient stages in shared memory at a time.
constexpr int kTokenTile = 1024;

unsigned Blocks(size_t n) { return static_cast<unsigned>((n + kThreads - 1) / kThreads); }

void Launched(const char* kernel) { Check(cudaGetLastError(), kernel); }

__device__ size_t Global() { return blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; }

constexpr unsigned kFullWarp = 0xffffffffu;

// sum over keys j in [0, count) of term(j), in key order, in double, the same value in every lane of
// the warp: each chunk of 32 keys is computed a key per lane, then every lane adds the chunk's terms
// lane by lane (shuffled), so the order is the CPU's single chain.
template <typename Term>
__device__ double WarpSumInOrder(size_t count, unsigned lane, Term term) {
  double sum = 0.0;
  for (size_t j0 = 0; j0 < count; j0 += 32) {
    const double value = j0 + lane < count ? term(j0 + lane) : 0.0;
    const unsigned chunk = count - j0 < 32 ? static_cast<unsigned>(count - j0) : 32u;
    for (unsigned l = 0; l < chunk; ++l) sum += __shfl_sync(kFullWarp, value, l);
  }
  return sum;
}

// Warp per row i of a (sequence, head)'s [T, T] block, in place: the scores q k^T (unscaled) become
// the CPU's causal softmax over keys 0..i (the max subtracted first, exps in double summed in key
// order, each divided by the sum), zeros after key i.
__global__ void CausalSoftmaxKernel(float* att, size_t rows, size_t t, double scale) {
  const size_t row = Global() / 32;
  const unsigned lane = threadIdx.x % 32;
  if (row >= rows) return;  // the whole warp: row is the same in its lanes
  const size_t i = row % t;
  float* a = att + row * t;
  float max = a[0];
  for (size_t j = lane; j <= i; j += 32) max = fmaxf(max, a[j]);
  for (unsigned offset = 16; offset > 0; offset /= 2) max = fmaxf(max, __shfl_xor_sync(kFullWarp, max, offset));
  const auto exp = [&](size_t j) { return fast_math::Exp((static_cast<double>(a[j]) - max) * scale); };
  const double sum = WarpSumInOrder(i + 1, lane, exp);
  for (size_t j = lane; j < t; j += 32) a[j] = j <= i ? static_cast<float>(exp(j) / sum) : 0.0f;
}

// Warp per row i, in place: datt (dy v^T) becomes ds = att (datt - sum_j datt att) / sqrt(D) over keys
// 0..i, in double as the CPU's, zeros after key i.
__global__ void CausalSoftmaxBackwardKernel(float* ds, const float* att, size_t rows, size_t t, double scale) {
  const size_t row = Global() / 32;
  const unsigned lane = threadIdx.x % 32;
  if (row >= rows) return;
  const size_t i = row % t;
  float* d = ds + row * t;
  const float* probs = att + row * t;
  const double dot = WarpSumInOrder(i + 1, lane, [&](size_t j) { return static_cast<double>(d[j]) * probs[j]; });
  for (size_t j = lane; j < t; j += 32) d[j] = j <= i ? static_cast<float>((d[j] - dot) * probs[j] * scale) : 0.0f;
}

__global__ void GeluForwardKernel(const float* x, float* y, size_t n) {
  const size_t i = Global();
  if (i >= n) return;
  const double v = x[i];
  y[i] = static_cast<float>(v * fast_math::NormalAt(v).cdf);
}

__global__ void GeluBackwardKernel(const float* x, const float* dy, float* dx, size_t n) {
  const size_t i = Global();
  if (i >= n) return;
  const double v = x[i];
  const fast_math::Normal normal = fast_math::NormalAt(v);
  dx[i] = static_cast<float>(dy[i] * (normal.cdf + v * normal.pdf));
}

// Warp per sample (its values a lane each, in turns): mean and biased variance over its d values in
// double, summed in order.
__global__ void LayernormForwardKernel(const float* x, const float* w, const float* b, float* y, float* xhat,
                                       double* invStd, double eps, size_t n, size_t d) {
  const size_t sample = Global() / 32;
  const unsigned lane = threadIdx.x % 32;
  if (sample >= n) return;  // the whole warp
  const float* in = x + sample * d;
  const double mean = WarpSumInOrder(d, lane, [&](size_t i) { return static_cast<double>(in[i]); }) / d;
  const double squares = WarpSumInOrder(d, lane, [&](size_t i) {
    const double centred = in[i] - mean;
    return centred * centred;
  });
  const double inv = 1.0 / sqrt(squares / d + eps);
  if (lane == 0) invStd[sample] = inv;
  for (size_t i = lane; i < d; i += 32) {
    const float normalised = static_cast<float>((in[i] - mean) * inv);
    xhat[sample * d + i] = normalised;
    y[sample * d + i] = static_cast<float>(static_cast<double>(normalised) * w[i] + b[i]);
  }
}

// Warp per sample: with g = dy w, dx = invStd (g - mean(g) - xhat mean(g xhat)), sums in double in order.
__global__ void LayernormInputGradKernel(const float* dy, const float* xhat, const float* w, const double* invStd, float* dx,
                                         size_t n, size_t d) {
  const size_t sample = Global() / 32;
  const unsigned lane = threadIdx.x % 32;
  if (sample >= n) return;
  const size_t base = sample * d;
  const auto g = [&](size_t i) { return static_cast<double>(dy[base + i]) * w[i]; };
  const double meanG = WarpSumInOrder(d, lane, g) / d;
  const double meanGXhat = WarpSumInOrder(d, lane, [&](size_t i) { return g(i) * xhat[base + i]; }) / d;
  for (size_t i = lane; i < d; i += 32) {
    dx[base + i] = static_cast<float>(invStd[sample] * (g(i) - meanG - xhat[base + i] * meanGXhat));
  }
}

// Thread per (chunk of kRowChunk samples, column): that chunk's sums of dy xhat and dy, in order.
__global__ void LayernormChunkSumsKernel(const float* dy, const float* xhat, double2* partials, size_t n, size_t d) {
  const size_t index = Global(), chunks = (n + kRowChunk - 1) / kRowChunk;
  if (index >= chunks * d) return;
  const size_t column = index % d, chunk = index / d;
  const size_t last = (chunk + 1) * kRowChunk < n ? (chunk + 1) * kRowChunk : n;
  double2 sum{0.0, 0.0};
  for (size_t sample = chunk * kRowChunk; sample < last; ++sample) {
    const size_t at = sample * d + column;
    sum.x += static_cast<double>(dy[at]) * xhat[at];
    sum.y += dy[at];
  }
  partials[index] = sum;
}

// Thread per column: dw and db, the chunks' sums added in chunk order.
__global__ void LayernormParamGradKernel(const double2* partials, float* dw, float* db, size_t chunks, size_t d) {
  const size_t column = Global();
  if (column >= d) return;
  double2 sum{0.0, 0.0};
  for (size_t chunk = 0; chunk < chunks; ++chunk) {
    sum.x += partials[chunk * d + column].x;
    sum.y += partials[chunk * d + column].y;
  }
  dw[column] = static_cast<float>(sum.x);
  db[column] = static_cast<float>(sum.y);
}

// Thread per position: its token id into tokens[], and the least bad position into *firstBad (the
// minimum: the same whatever the threads' order).
__global__ void TokensKernel(const float* x, int32_t* tokens, unsigned long long* firstBad, EmbeddingGeometry g) {
  const size_t r = Global();
  if (r >= g.n * g.t) return;
  const float value = x[r / g.t * g.stride + r % g.t];
  if (value >= 0.0f && value < static_cast<float>(g.vocab) && truncf(value) == value) {
    tokens[r] = static_cast<int32_t>(value);
  } else {
    atomicMin(firstBad, static_cast<unsigned long long>(r));
  }
}

// Thread per output value: y[r, i] = wte[token r, i] + wpe[r mod T, i].
__global__ void EmbeddingForwardKernel(const int32_t* tokens, const float* wte, const float* wpe, float* y, EmbeddingGeometry g) {
  const size_t index = Global();
  if (index >= g.n * g.t * g.c) return;
  const size_t r = index / g.c, i = index % g.c;
  y[index] = wte[static_cast<size_t>(tokens[r]) * g.c + i] + wpe[r % g.t * g.c + i];
}

// Thread per (position, value): dwpe = the sum over sequences of dy, in sequence order.
__global__ void PositionGradKernel(const float* dy, float* dwpe, EmbeddingGeometry g) {
  const size_t index = Global();
  if (index >= g.t * g.c) return;
  float sum = 0.0f;
  for (size_t s = 0; s < g.n; ++s) sum += dy[s * g.t * g.c + index];
  dwpe[index] = sum;
}

// Block per token v, a thread per value (strided over C): dy of every position holding v added into
// row v in position order, as the CPU's one thread adds them; the ids staged through shared memory.
__global__ void TokenGradKernel(const int32_t* tokens, const float* dy, float* dwte, bool accumulate, EmbeddingGeometry g) {
  __shared__ int32_t tile[kTokenTile];
  const int32_t v = blockIdx.x;
  const size_t rows = g.n * g.t;
  for (size_t i0 = 0; i0 < g.c; i0 += blockDim.x) {
    const size_t i = i0 + threadIdx.x;
    float sum = accumulate && i < g.c ? dwte[v * g.c + i] : 0.0f;
    for (size_t first = 0; first < rows; first += kTokenTile) {
      const size_t count = rows - first < kTokenTile ? rows - first : kTokenTile;
      __syncthreads();
      for (size_t k = threadIdx.x; k < count; k += blockDim.x) tile[k] = tokens[first + k];
      __syncthreads();
      if (i < g.c) {
        for (size_t k = 0; k < count; ++k) {
          if (tile[k] == v) sum += dy[(first + k) * g.c + i];
        }
      }
    }
    if (i < g.c) dwte[v * g.c + i] = sum;
  }
}

__global__ void DropoutMaskKernel(float* mask, size_t n, uint32_t prefix, double p, float scale) {
  const size_t i = Global();
  if (i >= n) return;
  mask[i] = DrawAt(prefix, static_cast<uint32_t>(i)) < p ? 0.0f : scale;
}

__global__ void MultiplyKernel(const float* a, const float* b, float* y, size_t n) {
  const size_t i = Global();
  if (i < n) y[i] = a[i] * b[i];
}
}  // namespace

namespace {
// The products of attention go to cuBLAS, a head at a time over the batch's sequences. Row-major
// [T, D] blocks of qkv (ld 3C), y and dy (ld C) and [T, T] blocks of att are, as cuBLAS reads
// memory, their transposes (column-major): so S = Q K^T is computed as S^T = K Q^T, and so on.
struct Heads {
  const AttentionGeometry& g;
  int t = static_cast<int>(g.t), d = static_cast<int>(g.d), c = static_cast<int>(g.h * g.d), ld = 3 * c;
  long long sequence = static_cast<long long>(g.t) * 3 * g.h * g.d;  // one sequence of qkv
  long long outputs = static_cast<long long>(g.t) * g.h * g.d;       // one sequence of y, dy
  long long blocks = static_cast<long long>(g.h) * g.t * g.t;        // one sequence's [H, T, T]

  // Where head h's matrix starts: its [T, D] part `part` (0 q, 1 k, 2 v) of qkv-shaped memory, its
  // [T, D] part of y-shaped memory, its [T, T] block of att-shaped memory.
  size_t QkvAt(size_t h, int part) const { return part * c + h * d; }
  size_t OutAt(size_t h) const { return h * d; }
  size_t BlockAt(size_t h) const { return h * g.t * g.t; }
  BatchedOperand Qkv(const float* base, size_t h, int part, bool transposed) const {
    return {base + QkvAt(h, part), ld, sequence, transposed};
  }
  BatchedOperand Out(const float* base, size_t h) const { return {base + OutAt(h), c, outputs, false}; }
  BatchedOperand Block(const float* base, size_t h, bool transposed) const { return {base + BlockAt(h), t, blocks, transposed}; }
  // Into qkv-shaped, y-shaped or att-shaped memory: the same places.
  void IntoQkv(int m, int n, int k, const BatchedOperand& a, const BatchedOperand& b, float* base, size_t h, int part) const {
    BatchedGemm(m, n, k, a, b, base + QkvAt(h, part), ld, sequence, static_cast<int>(g.n));
  }
  void IntoOut(int m, int n, int k, const BatchedOperand& a, const BatchedOperand& b, float* base, size_t h) const {
    BatchedGemm(m, n, k, a, b, base + OutAt(h), c, outputs, static_cast<int>(g.n));
  }
  void IntoBlock(int m, int n, int k, const BatchedOperand& a, const BatchedOperand& b, float* base, size_t h) const {
    BatchedGemm(m, n, k, a, b, base + BlockAt(h), t, blocks, static_cast<int>(g.n));
  }
};

unsigned WarpBlocks(size_t rows) { return static_cast<unsigned>((rows * 32 + kThreads - 1) / kThreads); }
}  // namespace

void AttentionForward(const float* qkv, float* att, float* y, const AttentionGeometry& g) {
  const size_t rows = g.n * g.h * g.t;
  if (rows == 0 || g.d == 0) return;
  const Heads heads{g};
  for (size_t h = 0; h < g.h; ++h) {
    // S^T = K Q^T: the scores q_i . k_j at att[i, j]
    heads.IntoBlock(heads.t, heads.t, heads.d, heads.Qkv(qkv, h, 1, true), heads.Qkv(qkv, h, 0, false), att, h);
  }
  CausalSoftmaxKernel<<<WarpBlocks(rows), kThreads>>>(att, rows, g.t, 1.0 / std::sqrt(static_cast<double>(g.d)));
  Launched("CausalSoftmaxKernel");
  for (size_t h = 0; h < g.h; ++h) {
    // Y^T = V^T A^T
    heads.IntoOut(heads.d, heads.t, heads.t, heads.Qkv(qkv, h, 2, false), heads.Block(att, h, false), y, h);
  }
}

void AttentionBackward(const float* qkv, const float* att, const float* dy, float* dqkv, const AttentionGeometry& g) {
  const size_t rows = g.n * g.h * g.t;
  if (rows == 0 || g.d == 0) return;
  auto* ds = static_cast<float*>(ScratchOf(Scratch::kAttention, rows * g.t * sizeof(float)));
  const Heads heads{g};
  for (size_t h = 0; h < g.h; ++h) {
    // dV^T = dY^T A;  dA^T = V dY^T
    heads.IntoQkv(heads.d, heads.t, heads.t, heads.Out(dy, h), heads.Block(att, h, true), dqkv, h, 2);
    heads.IntoBlock(heads.t, heads.t, heads.d, heads.Qkv(qkv, h, 2, true), heads.Out(dy, h), ds, h);
  }
  CausalSoftmaxBackwardKernel<<<WarpBlocks(rows), kThreads>>>(ds, att, rows, g.t, 1.0 / std::sqrt(static_cast<double>(g.d)));
  Launched("CausalSoftmaxBackwardKernel");
  for (size_t h = 0; h < g.h; ++h) {
    // dQ^T = K^T dS^T;  dK^T = Q^T dS
    heads.IntoQkv(heads.d, heads.t, heads.t, heads.Qkv(qkv, h, 1, false), heads.Block(ds, h, false), dqkv, h, 0);
    heads.IntoQkv(heads.d, heads.t, heads.t, heads.Qkv(qkv, h, 0, false), heads.Block(ds, h, true), dqkv, h, 1);
  }
}

void GeluForward(const float* x, float* y, size_t n) {
  if (n == 0) return;
  GeluForwardKernel<<<Blocks(n), kThreads>>>(x, y, n);
  Launched("GeluForwardKernel");
}

void GeluBackward(const float* x, const float* dy, float* dx, size_t n) {
  if (n == 0) return;
  GeluBackwardKernel<<<Blocks(n), kThreads>>>(x, dy, dx, n);
  Launched("GeluBackwardKernel");
}

void LayernormForward(const float* x, const float* w, const float* b, float* y, float* xhat, double* invStd, double eps,
                      size_t n, size_t d) {
  if (n == 0) return;
  LayernormForwardKernel<<<WarpBlocks(n), kThreads>>>(x, w, b, y, xhat, invStd, eps, n, d);
  Launched("LayernormForwardKernel");
}

void LayernormBackward(const float* dy, const float* xhat, const float* w, const double* invStd, float* dx, float* dw,
                       float* db, size_t n, size_t d) {
  const size_t chunks = (n + kRowChunk - 1) / kRowChunk;
  auto* partials = static_cast<double2*>(ScratchOf(Scratch::kPartials, std::max<size_t>(chunks * d, 1) * sizeof(double2)));
  if (chunks > 0) {
    LayernormChunkSumsKernel<<<Blocks(chunks * d), kThreads>>>(dy, xhat, partials, n, d);
    Launched("LayernormChunkSumsKernel");
  }
  LayernormParamGradKernel<<<Blocks(d), kThreads>>>(partials, dw, db, chunks, d);
  Launched("LayernormParamGradKernel");
  if (dx == nullptr || n == 0) return;
  LayernormInputGradKernel<<<WarpBlocks(n), kThreads>>>(dy, xhat, w, invStd, dx, n, d);
  Launched("LayernormInputGradKernel");
}

int64_t Tokens(const float* x, const EmbeddingGeometry& g, int32_t** tokens) {
  const size_t rows = g.n * g.t;
  *tokens = static_cast<int32_t*>(ScratchOf(Scratch::kTokens, std::max<size_t>(rows, 1) * sizeof(int32_t)));
  auto* firstBad = static_cast<unsigned long long*>(ScratchOf(Scratch::kFirstBad, sizeof(unsigned long long)));
  const unsigned long long none = ULLONG_MAX;
  FT_CUDA_CHECK(cudaMemcpy(firstBad, &none, sizeof none, cudaMemcpyHostToDevice));
  if (rows > 0) {
    TokensKernel<<<Blocks(rows), kThreads>>>(x, *tokens, firstBad, g);
    Launched("TokensKernel");
  }
  unsigned long long found = none;
  FT_CUDA_CHECK(cudaMemcpy(&found, firstBad, sizeof found, cudaMemcpyDeviceToHost));
  return found == none ? -1 : static_cast<int64_t>(found);
}

void EmbeddingForward(const int32_t* tokens, const float* wte, const float* wpe, float* y, const EmbeddingGeometry& g) {
  const size_t values = g.n * g.t * g.c;
  if (values == 0) return;
  EmbeddingForwardKernel<<<Blocks(values), kThreads>>>(tokens, wte, wpe, y, g);
  Launched("EmbeddingForwardKernel");
}

void EmbeddingBackward(const int32_t* tokens, const float* dy, float* dwte, float* dwpe, bool accumulate,
                       const EmbeddingGeometry& g) {
  if (g.t * g.c > 0) {
    PositionGradKernel<<<Blocks(g.t * g.c), kThreads>>>(dy, dwpe, g);
    Launched("PositionGradKernel");
  }
  if (g.vocab * g.c == 0) return;
  const unsigned threads = static_cast<unsigned>(std::min<size_t>(g.c, kMaxThreads));
  TokenGradKernel<<<static_cast<unsigned>(g.vocab), threads>>>(tokens, dy, dwte, accumulate, g);
  Launched("TokenGradKernel");
}

void DropoutMask(float* mask, size_t n, uint32_t prefix, double p) {
  if (n == 0) return;
  DropoutMaskKernel<<<Blocks(n), kThreads>>>(mask, n, prefix, p, static_cast<float>(1.0 / (1.0 - p)));
  Launched("DropoutMaskKernel");
}

void Multiply(const float* a, const float* b, float* y, size_t n) {
  if (n == 0) return;
  MultiplyKernel<<<Blocks(n), kThreads>>>(a, b, y, n);
  Launched("MultiplyKernel");
}

}  // namespace ft::cuda
