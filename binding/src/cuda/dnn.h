// Convolutions (cuDNN; the weight gradient of a convolution over few input values by the addon's
// own kernels, kernels.h), linear layers and batched products (cuBLAS) on device memory, in full
// float32 (no TF32) and with deterministic algorithms only, so that the same inputs give the same
// bits on the same GPU.
#pragma once
#include <vector>

namespace ft::cuda {

// dims: [N, C, H, W, K, R, S, stride, pad], as the CPU backend's ConvShape.
void ConvForward(const std::vector<int>& dims, const float* x, const float* w, const float* b, float* y);
void ConvBackwardData(const std::vector<int>& dims, const float* dy, const float* w, float* dx);
void ConvBackwardWeights(const std::vector<int>& dims, const float* x, const float* dy, float* dw, float* db);
// [OH, OW] of a convolution's output.
std::vector<int> ConvOutput(const std::vector<int>& dims);

// y[N, O] = x[N, I] w[O, I]^T + b.
void LinearForward(int n, int in, int out, const float* x, const float* w, const float* b, float* y);
// dx (skipped when null) = dy w; dw = dy^T x; db = column sums of dy.
void LinearBackward(int n, int in, int out, const float* x, const float* w, const float* dy, float* dx,
                    float* dw, float* db);

// C_b = op(A_b) op(B_b) for b < batch, column-major as cuBLAS takes matrices (C_b m x n, op(A_b)
// m x k, op(B_b) k x n; X_b at X + b strideX), in float32 (pedantic: no TF32), beta 0.
struct BatchedOperand {
  const float* data;
  int ld;
  long long stride;
  bool transposed;
};
void BatchedGemm(int m, int n, int k, const BatchedOperand& a, const BatchedOperand& b, float* c, int ldc, long long strideC,
                 int batch);

}  // namespace ft::cuda
