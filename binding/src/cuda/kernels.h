// The GPU backend's own CUDA kernels (kernels.cu): element-wise, bias, pooling, softmax
// cross-entropy. Each is deterministic: every output is computed by one thread, or by one block in
// a fixed order, never by atomics, so the same inputs give the same bits on the same GPU.
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

// The optimizers' updates (optimizer.cu): the CPU backend's arithmetic and bits. An output is its
// input or does not overlap it.
void SgdUpdate(const float* p, const float* g, const float* v, float* pOut, float* vOut, const SgdScalars& s, size_t n);
void SgdStateInput(const float* p, const float* g, float* input, const SgdScalars& s, size_t n);
void SgdReplay(float* v, const float* input, const SgdScalars& s, size_t n);
void AdamwUpdate(const float* p, const float* g, const float* m, const float* v, float* pOut, float* mOut, float* vOut,
                 const AdamwScalars& s, size_t n);
void AdamwReplay(float* m, float* v, const float* g, const AdamMoments& a, size_t n);

}  // namespace ft::cuda
