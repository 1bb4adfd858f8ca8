// The GPU backend's own CUDA kernels: element-wise, bias, pooling, softmax cross-entropy
// (kernels.cu), a convolution's weight gradient (weight_gradient.cu), normalisation (normalization.cu), a transformer's (transformer.cu) and the
// optimizers' updates (optimizer.cu). Each is deterministic: every output is computed by one
// thread, warp or block in a fixed order (the one atomic, transformer.cu's first bad token, is a
// minimum), so the same inputs give the same bits on the same GPU.
// Pointers are device memory; each call launches on the default stream and checks the launch.
#pragma once
#include <cstddef>
#include <cstdint>

#include "optimizer_math.h"

namespace ft::cuda {

void ReluForward(const float* x, float* y, size_t n);
void ReluBackward(const float* x, const float* dy, float* dx, size_t n);
void AddInPlace(float* acc, const float* x, size_t n);
void ScaleInPlace(float* x, float scale, size_t n);

// y[o, c, i] += b[c] over [outer, channels, inner].
void AddBias(float* y, const float* b, size_t outer, size_t channels, size_t inner);
// db[c] = the sum of dy[o, c, i] over o and i, in a fixed order.
void SumPerChannel(const float* dy, float* db, size_t outer, size_t channels, size_t inner);

// dlogits = (softmax(logits) - onehot(labels)) / n, row loss[r] = -log softmax(logits)[label], in
// double (as the CPU kernel computes them).
void SoftmaxCrossEntropy(const float* logits, const int32_t* labels, float* dlogits, double* rowLoss,
                         size_t n, size_t classes);

// [N, C, H, W] pooled by an R x R window: max (argmax: the input index within its map, the first
// largest in window order, padding excluded) or average (padding counted, as the CPU's).
struct PoolGeometry {
  int n, c, h, w, r, stride, pad, oh, ow;
};
void MaxPoolForward(const float* x, float* y, int32_t* argmax, const PoolGeometry& g);
void MaxPoolBackward(const float* dy, float* dx, const int32_t* argmax, const PoolGeometry& g);
void AvgPoolForward(const float* x, float* y, const PoolGeometry& g);
void AvgPoolBackward(const float* dy, float* dx, const PoolGeometry& g);

// A convolution's weight gradient by the addon's own kernels (weight_gradient.cu) where its filters
// see at most kFewInputs input values (C R S), and cuDNN's deterministic algorithms are slow: dw
// [K, C, R, S] overwritten, summed over fixed runs of output positions, the runs added in order.
struct ConvGeometry {
  int n, c, h, w, k, r, s, stride, pad, oh, ow;
};
constexpr int kFewInputs = 128;
bool OwnWeightGradient(const ConvGeometry& g);
void ConvWeightGradient(const float* x, const float* dy, float* dw, const ConvGeometry& g);

// Batchnorm and global average pooling over plain [N, C, S] activations (normalization.cu), as the
// CPU's kernels define them (src/nn/backend.ts); batchnorm's sums in double, in a fixed order of its
// own, global pooling's in the CPU's order (its bits).
struct NormGeometry {
  size_t n, c, s;
};
void BatchnormForwardTrain(const float* x, const float* w, const float* b, float* y, float* xhat, double* mean,
                           double* unbiased, double* invStd, double eps, const NormGeometry& g);
void BatchnormForwardEval(const float* x, const float* w, const float* b, const float* runningMean, const float* runningVar,
                          float* y, double eps, const NormGeometry& g);
// dx may be null (not wanted).
void BatchnormBackward(const float* dy, const float* xhat, const float* w, const double* invStd, float* dx, float* dw,
                       float* db, const NormGeometry& g);
void GlobalAvgPoolForward(const float* x, float* y, const NormGeometry& g);
void GlobalAvgPoolBackward(const float* dy, float* dx, const NormGeometry& g);

// A transformer's kernels (transformer.cu), as the CPU's define them (src/nn/backend.ts).
// [N, T, H, D]: N sequences of T positions, H heads of D values (qkv [N, T, 3 H D], att [N, H, T, T]).
struct AttentionGeometry {
  size_t n, t, h, d;
};
void AttentionForward(const float* qkv, float* att, float* y, const AttentionGeometry& g);
// dqkv overwritten; uses the kAttention scratch for the scores' gradient.
void AttentionBackward(const float* qkv, const float* att, const float* dy, float* dqkv, const AttentionGeometry& g);
void GeluForward(const float* x, float* y, size_t n);
void GeluBackward(const float* x, const float* dy, float* dx, size_t n);
// n samples of d values; invStd [n] in double. dx may be null (not wanted).
void LayernormForward(const float* x, const float* w, const float* b, float* y, float* xhat, double* invStd, double eps,
                      size_t n, size_t d);
void LayernormBackward(const float* dy, const float* xhat, const float* w, const double* invStd, float* dx, float* dw,
                       float* db, size_t n, size_t d);
// [N, T, C, V] and the stride of x's rows (T + 1 token ids per sequence).
struct EmbeddingGeometry {
  size_t n, t, c, vocab, stride;
};
// The token ids of x (floats) into *tokens (kTokens scratch); the first position (n T + t) whose
// value is no integer in [0, V), or -1 when all are.
int64_t Tokens(const float* x, const EmbeddingGeometry& g, int32_t** tokens);
void EmbeddingForward(const int32_t* tokens, const float* wte, const float* wpe, float* y, const EmbeddingGeometry& g);
void EmbeddingBackward(const int32_t* tokens, const float* dy, float* dwte, float* dwpe, bool accumulate,
                       const EmbeddingGeometry& g);
// mask[i] = 0 where mix(prefix, i) / 2^32 < p, else 1 / (1 - p) rounded to float (src/base/random.ts's draw).
void DropoutMask(float* mask, size_t n, uint32_t prefix, double p);
void Multiply(const float* a, const float* b, float* y, size_t n);

// The optimizers' updates (optimizer.cu): the CPU backend's arithmetic and bits. An output is its
// input or does not overlap it.
void SgdUpdate(const float* p, const float* g, const float* v, float* pOut, float* vOut, const SgdScalars& s, size_t n);
void SgdStateInput(const float* p, const float* g, float* input, const SgdScalars& s, size_t n);
void SgdReplay(float* v, const float* input, const SgdScalars& s, size_t n);
void AdamwUpdate(const float* p, const float* g, const float* m, const float* v, float* pOut, float* mOut, float* vOut,
                 const AdamwScalars& s, size_t n);
void AdamwReplay(float* m, float* v, const float* g, const AdamMoments& a, size_t n);

}  // namespace ft::cuda
