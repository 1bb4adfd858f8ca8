// The optimizers' arithmetic on one element, compiled for the CPU (cpu/elementwise.cc) and the GPU
// (cuda/optimizer.cu) from this one text, so that both compute the same bits: plain float
// operations, each rounded (both files are built without multiply-add contraction: a fused a b + c
// rounds once and would give other bits), square roots and divisions correctly rounded.
#pragma once
#include <cmath>

#ifdef __CUDACC__
#define FT_HOST_DEVICE __host__ __device__
#else
#define FT_HOST_DEVICE
#endif

namespace ft {

struct SgdScalars {
  float lr, momentum, decay;
};

// v = momentum v + (g + decay p);  p -= lr v  (Caffe's and PyTorch's SGD). Returns the new v; p is updated.
FT_HOST_DEVICE inline float SgdMomentumInput(const SgdScalars& s, float p, float g) { return g + s.decay * p; }
FT_HOST_DEVICE inline float SgdVelocity(const SgdScalars& s, float v, float input) { return s.momentum * v + input; }
FT_HOST_DEVICE inline float SgdParam(const SgdScalars& s, float p, float velocity) { return p - s.lr * velocity; }

// AdamW's moment updates: m = beta1 m + (1 - beta1) g;  v = beta2 v + ((1 - beta2) g) g
// (PyTorch's mul_/add_/addcmul_).
struct AdamMoments {
  float beta1, oneMinusBeta1, beta2, oneMinusBeta2;
};

FT_HOST_DEVICE inline void AdamAdvance(const AdamMoments& a, float& m, float& v, float g) {
  m = a.beta1 * m + a.oneMinusBeta1 * g;
  v = a.beta2 * v + a.oneMinusBeta2 * g * g;
}

// PyTorch's AdamW with its scalars worked out in double and rounded once (cpu/optimizer_args.cc):
//   p *= keep (1 - lr wd);  moments;  p += stepSize (-lr / (1 - beta1^t)) * (m / (sqrt(v) / correction2Sqrt + eps)).
struct AdamwScalars {
  AdamMoments moments;
  float eps, keep, stepSize, correction2Sqrt;
};

// The new parameter; m and v advanced.
FT_HOST_DEVICE inline float AdamwParam(const AdamwScalars& s, float p, float& m, float& v, float g) {
  float param = p * s.keep;
  AdamAdvance(s.moments, m, v, g);
  float denom = sqrtf(v) / s.correction2Sqrt + s.eps;
  return param + s.stepSize * (m / denom);
}

}  // namespace ft
