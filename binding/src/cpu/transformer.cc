// The kernels a GPT-style transformer adds to the others: causal multi-head self-attention, the
// exact GELU, token + position embedding, and the two reductions gradient clipping needs (the sum of
// squares, a scale in place). The contracts are Backend's (src/nn/backend.ts).
// Every result is computed in a fixed order that the thread count does not change: attention splits
// its (sequence, head) pairs over setThreads()'s OpenMP threads, each pair computed alone by one
// thread with single-threaded OpenBLAS products; the element-wise kernels split their range (each
// element computed alone); the sum of squares splits its fixed blocks.
// exp() and erfc() are fast_math.h's, not the C library's (whose code, and so bits, the CPU picks):
// the softmax and GELU loops that call them are built for three levels and run the one the pinned
// level allows (LevelBuild below), all three giving the same bits.
#include <algorithm>
#include <climits>
#include <cmath>
#include <new>
#include <string>
#include <vector>

#include "args.h"
#include "cpu_kernels.h"
#include "fast_math.h"
#include "kernel_level.h"
#include "tensor_args.h"

namespace ft::cpu {

namespace {
// Below this many elements a parallel region costs more than it saves (as in elementwise.cc).
constexpr size_t kParallelFrom = size_t{1} << 15;

// The causal products run in row blocks of this many positions: block [i0, i1) of the scores needs
// keys 0..i1 only, so the products skip most of the masked upper triangle (at T = 256, 62% of the
// full products' work) while each call stays large enough for OpenBLAS's kernels.
constexpr size_t kCausalBlock = 64;

// sumOfSquares sums blocks of this many values, each in order, then the block sums in order.
constexpr size_t kSquaresBlock = size_t{1} << 16;

// One thread's working memory for a (sequence, head) pair: a [T, T] float matrix (the scores, or
// the gradient of att) and a row of doubles. Kept between calls: no allocation per pair or call.
struct PairScratch {
  std::vector<float> matrix;
  std::vector<double> row;
};

PairScratch& ScratchFor(size_t t) {
  thread_local PairScratch scratch;
  if (scratch.matrix.size() < t * t) scratch.matrix.resize(t * t);
  if (scratch.row.size() < t) scratch.row.resize(t);
  return scratch;
}

// Runs pair(p, scratch) for p in [0, pairs) over the OpenMP threads, each p on one thread. A failed
// allocation of scratch inside the parallel region would end the process; it is thrown after instead.
template <typename Pair>
void ForEachPair(size_t pairs, size_t t, Pair pair) {
  bool failed = false;
#pragma omp parallel if (pairs > 1)
  {
    PairScratch* scratch = nullptr;
    try {
      scratch = &ScratchFor(t);
    } catch (const std::bad_alloc&) {
#pragma omp atomic write
      failed = true;
    }
#pragma omp for schedule(static)
    for (size_t p = 0; p < pairs; ++p) {
      if (scratch != nullptr) pair(p, *scratch);
    }
  }
  if (failed) throw std::bad_alloc();
}

// The first position after row i's causal block: rows of a block share their keys 0..BlockEnd.
size_t BlockEnd(size_t i, size_t t) { return std::min(t, (i / kCausalBlock + 1) * kCausalBlock); }

// The loops that call fast_math's functions are built three times: for the baseline (SSE2: two
// doubles a vector), x86-64-v3 (AVX2: four) and x86-64-v4 (AVX-512: eight), flatten inlining the loop
// and its math into each. The three give the same bits: an element's operations are the same IEEE
// operations at any vector width, and CMakeLists.txt builds this file with -ffp-contract=off, so the
// v3 and v4 builds, whose targets have FMA, never fuse a multiply and an add.
#define FT_LEVEL_BUILDS(Name, Params, Args)                                                \
  __attribute__((target("arch=x86-64-v4"), flatten)) void Name##V4 Params { Name Args; } \
  __attribute__((target("arch=x86-64-v3"), flatten)) void Name##V3 Params { Name Args; } \
  __attribute__((flatten)) void Name##Baseline Params { Name Args; }                      \
  auto Name##Build() { return LevelBuild(Name##V4, Name##V3, Name##Baseline); }

// The build the pinned level allows (kernel_level.h): the x86-64-v4 one where the addon's vector
// kernels run at v4, the v3 one at v3 (or, unpinned, on a CPU that has it), else the baseline's.
template <typename Fn>
Fn LevelBuild(Fn v4, Fn v3, Fn baseline) {
  if (VectorKernelsV4()) return v4;
  Level level = KernelLevel();
  if (level == Level::kV3 || (level == Level::kNative && __builtin_cpu_supports("x86-64-v3"))) return v3;
  return baseline;
}

// Runs range(begin, count) over [0, n) in chunks of 4096 elements split over the OpenMP threads (from
// kParallelFrom elements): for element-wise loops, whose bits do not depend on the split.
template <typename Range>
void InChunks(size_t n, Range range) {
  constexpr size_t kChunk = 4096;
  const size_t chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) if (n >= kParallelFrom)
  for (size_t c = 0; c < chunks; ++c) range(c * kChunk, std::min(kChunk, n - c * kChunk));
}

// Softmax of row i of s[T, T] over keys 0..i into row i of a, for every row, zeros after key i; in
// double: the max subtracted first keeps exp() in range, the scale applied to the difference (the
// same value as scaling the scores first). The exps are computed apart from their sum, so that they
// vectorise; the sum adds them in order. e: T doubles of scratch.
inline void CausalSoftmax(const float* s, float* a, double* e, size_t t, double scale) {
  for (size_t i = 0; i < t; ++i) {
    const float* row = s + i * t;
    float* probs = a + i * t;
    float max = row[0];
    for (size_t j = 1; j <= i; ++j) max = std::max(max, row[j]);
    for (size_t j = 0; j <= i; ++j) e[j] = fast_math::Exp((static_cast<double>(row[j]) - max) * scale);
    double sum = 0.0;
    for (size_t j = 0; j <= i; ++j) sum += e[j];
    for (size_t j = 0; j <= i; ++j) probs[j] = static_cast<float>(e[j] / sum);
    std::fill(probs + i + 1, probs + t, 0.0f);
  }
}
FT_LEVEL_BUILDS(CausalSoftmax, (const float* s, float* a, double* e, size_t t, double scale), (s, a, e, t, scale))
}  // namespace

// attentionForward(qkv, att, y, [N, T, H, D]): qkv[N, T, 3C] (query, key, value side by side, head h
// at [h D, (h + 1) D) of each, C = H D), att[N, H, T, T] = causal softmax(q k^T / sqrt(D)) with zeros
// above the diagonal, y[N, T, C] = att v.
Napi::Value AttentionForward(const Napi::CallbackInfo& info) {
  const char* m = "attentionForward";
  std::vector<int> dims = DimsArg(info, 3, m, "shape", 4);
  size_t n = dims[0], t = dims[1], h = dims[2], d = dims[3], c = h * d;
  const float* qkv = FloatArg(info, 0, m, "qkv", n * t * 3 * c);
  float* att = FloatArg(info, 1, m, "att", n * h * t * t);
  float* y = FloatArg(info, 2, m, "y", n * t * c);
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  const size_t ld = 3 * c;
  const auto softmax = CausalSoftmaxBuild();
  ForEachPair(n * h, t, [&](size_t p, PairScratch& scratch) {
    size_t seq = p / h, head = p % h;
    const float* q = qkv + seq * t * ld + head * d;  // [T, D], ld 3C
    const float* k = q + c;
    const float* v = q + 2 * c;
    float* a = att + p * t * t;               // [T, T]
    float* out = y + seq * t * c + head * d;  // [T, D], ld C
    float* s = scratch.matrix.data();         // [T, T]: scores q k^T, unscaled; row i to BlockEnd(i) only
    double* e = scratch.row.data();
    for (size_t i0 = 0; i0 < t; i0 += kCausalBlock) {
      size_t i1 = BlockEnd(i0, t);
      OpenBlasGemm('N', 'T', i1 - i0, i1, d, 1.0f, q + i0 * ld, ld, k, ld, 0.0f, s + i0 * t, t);
    }
    softmax(s, a, e, t, scale);
    // y = att v, row block [i0, i1) over values 0..i1 (att is 0 beyond)
    for (size_t i0 = 0; i0 < t; i0 += kCausalBlock) {
      size_t i1 = BlockEnd(i0, t);
      OpenBlasGemm('N', 'N', i1 - i0, d, i1, 1.0f, a + i0 * t, t, v, ld, 0.0f, out + i0 * c, c);
    }
  });
  return info.Env().Undefined();
}

// attentionBackward(qkv, att, dy, dqkv, [N, T, H, D]): dqkv[N, T, 3C] (overwritten) from the
// forward's qkv and att and dy[N, T, C]:
//   dv = att^T dy;  datt = dy v^T;  ds = att (datt - rowsum(datt att)) / sqrt(D);  dq = ds k;  dk = ds^T q.
Napi::Value AttentionBackward(const Napi::CallbackInfo& info) {
  const char* m = "attentionBackward";
  std::vector<int> dims = DimsArg(info, 4, m, "shape", 4);
  size_t n = dims[0], t = dims[1], h = dims[2], d = dims[3], c = h * d;
  const float* qkv = FloatArg(info, 0, m, "qkv", n * t * 3 * c);
  const float* att = FloatArg(info, 1, m, "att", n * h * t * t);
  const float* dy = FloatArg(info, 2, m, "dy", n * t * c);
  float* dqkv = FloatArg(info, 3, m, "dqkv", n * t * 3 * c);
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  const size_t ld = 3 * c;
  ForEachPair(n * h, t, [&](size_t p, PairScratch& scratch) {
    size_t seq = p / h, head = p % h;
    const float* q = qkv + seq * t * ld + head * d;  // [T, D], ld 3C
    const float* k = q + c;
    const float* v = q + 2 * c;
    const float* a = att + p * t * t;              // [T, T], 0 above the diagonal
    const float* g = dy + seq * t * c + head * d;  // [T, D], ld C
    float* dq = dqkv + seq * t * ld + head * d;    // [T, D], ld 3C
    float* dk = dq + c;
    float* dv = dq + 2 * c;
    float* ds = scratch.matrix.data();  // [T, T]: datt, then ds in place
    // dv = att^T dy: dv's row block [j0, j1) gathers rows j0..T of att (earlier rows are 0 in its columns)
    for (size_t j0 = 0; j0 < t; j0 += kCausalBlock) {
      size_t j1 = BlockEnd(j0, t);
      OpenBlasGemm('T', 'N', j1 - j0, d, t - j0, 1.0f, a + j0 * t + j0, t, g + j0 * c, c, 0.0f, dv + j0 * ld, ld);
    }
    // datt = dy v^T, row block [i0, i1) over keys 0..i1
    for (size_t i0 = 0; i0 < t; i0 += kCausalBlock) {
      size_t i1 = BlockEnd(i0, t);
      OpenBlasGemm('N', 'T', i1 - i0, i1, d, 1.0f, g + i0 * c, c, v, ld, 0.0f, ds + i0 * t, t);
    }
    // ds = att (datt - rowsum(datt att)) / sqrt(D) over keys 0..i, in double; zeros from i + 1 to the
    // block's end, which the products below read
    for (size_t i = 0; i < t; ++i) {
      float* row = ds + i * t;
      const float* probs = a + i * t;
      double dot = 0.0;
      for (size_t j = 0; j <= i; ++j) dot += static_cast<double>(row[j]) * probs[j];
      for (size_t j = 0; j <= i; ++j) {
        row[j] = static_cast<float>((row[j] - dot) * probs[j] * scale);
      }
      std::fill(row + i + 1, row + BlockEnd(i, t), 0.0f);
    }
    // dq = ds k, row block [i0, i1) over keys 0..i1; dk = ds^T q, row block [i0, i1) over rows i0..T of ds
    for (size_t i0 = 0; i0 < t; i0 += kCausalBlock) {
      size_t i1 = BlockEnd(i0, t);
      OpenBlasGemm('N', 'N', i1 - i0, d, i1, 1.0f, ds + i0 * t, t, k, ld, 0.0f, dq + i0 * ld, ld);
      OpenBlasGemm('T', 'N', i1 - i0, d, t - i0, 1.0f, ds + i0 * t + i0, t, q + i0 * ld, ld, 0.0f, dk + i0 * ld, ld);
    }
  });
  return info.Env().Undefined();
}

namespace {
// GELU and its derivative at n elements: y = x Phi(x); dx = dy (Phi(x) + x phi(x)); each in double,
// rounded once.
inline void GeluForwardAt(const float* x, float* y, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    double v = x[i];
    y[i] = static_cast<float>(v * fast_math::NormalAt(v).cdf);
  }
}
FT_LEVEL_BUILDS(GeluForwardAt, (const float* x, float* y, size_t n), (x, y, n))

inline void GeluBackwardAt(const float* x, const float* dy, float* dx, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    double v = x[i];
    fast_math::Normal normal = fast_math::NormalAt(v);
    dx[i] = static_cast<float>(dy[i] * (normal.cdf + v * normal.pdf));
  }
}
FT_LEVEL_BUILDS(GeluBackwardAt, (const float* x, const float* dy, float* dx, size_t n), (x, dy, dx, n))
}  // namespace

// geluForward(x, y): y = x Phi(x) = 0.5 x (1 + erf(x / sqrt(2))), in double, rounded once. Phi(x) is
// fast_math's: for x < 0 the tail erfc(-x / sqrt 2) / 2 itself, not 1 + erf(x / sqrt 2), so tiny
// values keep their relative accuracy (GELU(-10) = -7.6e-23, not 0); the float result is a denormal
// from x = -13.15 and -0 from -14.36.
Napi::Value GeluForward(const Napi::CallbackInfo& info) {
  auto [x, n] = FloatSpanArg(info, 0, "geluForward", "x");
  float* y = FloatArg(info, 1, "geluForward", "y", n);
  const auto gelu = GeluForwardAtBuild();
  InChunks(n, [&](size_t begin, size_t count) { gelu(x + begin, y + begin, count); });
  return info.Env().Undefined();
}

// geluBackward(x, dy, dx): dx = dy GELU'(x), GELU'(x) = Phi(x) + x phi(x), in double, rounded once.
Napi::Value GeluBackward(const Napi::CallbackInfo& info) {
  auto [x, n] = FloatSpanArg(info, 0, "geluBackward", "x");
  const float* dy = FloatArg(info, 1, "geluBackward", "dy", n);
  float* dx = FloatArg(info, 2, "geluBackward", "dx", n);
  const auto gelu = GeluBackwardAtBuild();
  InChunks(n, [&](size_t begin, size_t count) { gelu(x + begin, dy + begin, dx + begin, count); });
  return info.Env().Undefined();
}

namespace {
// The token ids of an embedding's N x T positions, x[n stride + t] (floats holding integers),
// checked all before anything is written: a RangeError names the first bad one.
std::vector<int> Tokens(const Napi::CallbackInfo& info, const char* method, const float* x, size_t stride,
                        size_t n, size_t t, size_t vocab) {
  std::vector<int> tokens(n * t);
  for (size_t s = 0; s < n; ++s) {
    for (size_t p = 0; p < t; ++p) {
      float value = x[s * stride + p];
      if (!(value >= 0.0f && value < static_cast<float>(vocab) && std::trunc(value) == value)) {
        throw BadTokenError(info.Env(), method, s, p, s * stride + p, value, vocab);
      }
      tokens[s * t + p] = static_cast<int>(value);
    }
  }
  return tokens;
}
}  // namespace

// embeddingForward(x, stride, wte, wpe, y, [N, T, C, V]): y[n, t] = wte[x[n stride + t]] + wpe[t];
// x holds N rows of `stride` (>= T) values, wte[V, C], wpe[T, C], y[N, T, C].
Napi::Value EmbeddingForward(const Napi::CallbackInfo& info) {
  const char* m = "embeddingForward";
  std::vector<int> dims = DimsArg(info, 5, m, "shape", 4);
  size_t n = dims[0], t = dims[1], c = dims[2], vocab = dims[3];
  size_t stride = IntArg(info, 1, m, "stride", static_cast<int>(t), INT_MAX);
  const float* x = FloatArg(info, 0, m, "x", n * stride);
  const float* wte = FloatArg(info, 2, m, "wte", vocab * c);
  const float* wpe = FloatArg(info, 3, m, "wpe", t * c);
  float* y = FloatArg(info, 4, m, "y", n * t * c);
  std::vector<int> tokens = Tokens(info, m, x, stride, n, t, vocab);
  const size_t rows = n * t;
#pragma omp parallel for schedule(static) if (rows * c >= kParallelFrom)
  for (size_t r = 0; r < rows; ++r) {
    const float* token = wte + static_cast<size_t>(tokens[r]) * c;
    const float* position = wpe + (r % t) * c;
    float* out = y + r * c;
    for (size_t i = 0; i < c; ++i) out[i] = token[i] + position[i];
  }
  return info.Env().Undefined();
}

// embeddingBackward(x, stride, dy, dwte, dwpe, [N, T, C, V], accumulate): dwpe[t] (overwritten) =
// sum over n of dy[n, t], n in order; dwte zeroed unless `accumulate`, then dy[n, t] added into row
// x[n stride + t], n then t in order (one thread: rows of repeated tokens collide).
Napi::Value EmbeddingBackward(const Napi::CallbackInfo& info) {
  const char* m = "embeddingBackward";
  std::vector<int> dims = DimsArg(info, 5, m, "shape", 4);
  size_t n = dims[0], t = dims[1], c = dims[2], vocab = dims[3];
  size_t stride = IntArg(info, 1, m, "stride", static_cast<int>(t), INT_MAX);
  const float* x = FloatArg(info, 0, m, "x", n * stride);
  const float* dy = FloatArg(info, 2, m, "dy", n * t * c);
  float* dwte = FloatArg(info, 3, m, "dwte", vocab * c);
  float* dwpe = FloatArg(info, 4, m, "dwpe", t * c);
  if (!info[6].IsBoolean()) ThrowArg(info.Env(), m, "accumulate", "a boolean", info[6]);
  bool accumulate = info[6].As<Napi::Boolean>().Value();
  std::vector<int> tokens = Tokens(info, m, x, stride, n, t, vocab);
  std::fill(dwpe, dwpe + t * c, 0.0f);
  for (size_t s = 0; s < n; ++s) {
    const float* rows = dy + s * t * c;
    for (size_t i = 0; i < t * c; ++i) dwpe[i] += rows[i];
  }
  if (!accumulate) std::fill(dwte, dwte + vocab * c, 0.0f);
  for (size_t r = 0; r < n * t; ++r) {
    float* row = dwte + static_cast<size_t>(tokens[r]) * c;
    const float* g = dy + r * c;
    for (size_t i = 0; i < c; ++i) row[i] += g[i];
  }
  return info.Env().Undefined();
}

// sumOfSquares(x) -> sum of x[i]^2 in double: blocks of 2^16 values, each summed in order, then the
// block sums in order (blocks computed in parallel: the same bits at any thread count).
Napi::Value SumOfSquares(const Napi::CallbackInfo& info) {
  auto [x, n] = FloatSpanArg(info, 0, "sumOfSquares", "x");
  const size_t blocks = (n + kSquaresBlock - 1) / kSquaresBlock;
  std::vector<double> sums(blocks);
#pragma omp parallel for schedule(static) if (blocks > 1)
  for (size_t b = 0; b < blocks; ++b) {
    const float* values = x + b * kSquaresBlock;
    const size_t count = std::min(kSquaresBlock, n - b * kSquaresBlock);
    double sum = 0.0;
    for (size_t i = 0; i < count; ++i) sum += static_cast<double>(values[i]) * values[i];
    sums[b] = sum;
  }
  double total = 0.0;
  for (double sum : sums) total += sum;
  return Napi::Number::New(info.Env(), total);
}

// scaleInPlace(x, scale): x *= scale, the scale rounded to float32 first.
Napi::Value ScaleInPlace(const Napi::CallbackInfo& info) {
  auto [x, n] = FloatSpanArg(info, 0, "scaleInPlace", "x");
  const float scale = static_cast<float>(NumberArg(info, 1, "scaleInPlace", "scale"));
#pragma omp parallel for schedule(static) if (n >= kParallelFrom)
  for (size_t i = 0; i < n; ++i) x[i] *= scale;
  return info.Env().Undefined();
}

}  // namespace ft::cpu
