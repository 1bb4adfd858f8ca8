// Fully connected layers: y[N,O] = x[N,I] w[O,I]^T + b[O], and its gradients, as matrix
// products on oneDNN's JIT sgemm or OpenBLAS (both at the pinned level: kernel_level.h); and
// OpenBlasGemm, OpenBLAS's alone, for products inside a kernel's OpenMP loop (transformer.cc).
#include <oneapi/dnnl/dnnl.h>

#include <string>

#include "cpu_kernels.h"
#include "kernel_level.h"
#include "tensor_args.h"

namespace ft::cpu {

void OpenBlasGemm(char transA, char transB, size_t m, size_t n, size_t k, float alpha, const float* a, size_t lda,
                  const float* b, size_t ldb, float beta, float* c, size_t ldc) {
  auto op = [](char trans) { return trans == 'T' ? CblasTrans : CblasNoTrans; };
  OpenBlasSgemm()(CblasRowMajor, op(transA), op(transB), m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

namespace {
// Below this many multiply-adds OpenBLAS's small-matrix kernels win: oneDNN's sgemm has a fixed
// cost of about 10 us (a 10-class output layer at batch 64: 6 us on OpenBLAS, 16 on oneDNN).
// Above it oneDNN's is 1.1-1.2x faster at batch 64 and up to 2.5x at a micro-batch of 8.
constexpr double kSmallProduct = 1 << 20;

// Row-major c[m,n] = op(a) op(b) + beta c, op transposing where `trans*` is 'T'. A given shape
// always takes the same path, so the bits depend on the shape (and the thread count) only.
void Gemm(Napi::Env env, const char* method, char transA, char transB, size_t m, size_t n, size_t k, const float* a,
          size_t lda, const float* b, size_t ldb, float beta, float* c, size_t ldc) {
  if (static_cast<double>(m) * n * k < kSmallProduct) {
    OpenBlasGemm(transA, transB, m, n, k, 1.0f, a, lda, b, ldb, beta, c, ldc);
    return;
  }
  dnnl_status_t status = dnnl_sgemm(transA, transB, m, n, k, 1.0f, a, lda, b, ldb, beta, c, ldc);
  if (status != dnnl_success) {
    throw Napi::Error::New(env, std::string(method) + ": oneDNN's sgemm failed (dnnl_status_t " + std::to_string(status) + ")");
  }
}
}  // namespace

// linearForward(x, w, b, y, [N, I, O])
Napi::Value LinearForward(const Napi::CallbackInfo& info) {
  const char* m = "linearForward";
  std::vector<int> d = DimsArg(info, 4, m, "shape", 3);
  size_t n = d[0], in = d[1], out = d[2];
  float* x = FloatArg(info, 0, m, "x", n * in);
  float* w = FloatArg(info, 1, m, "w", out * in);
  float* b = FloatArg(info, 2, m, "b", out);
  float* y = FloatArg(info, 3, m, "y", n * out);
  for (size_t i = 0; i < n; ++i) std::copy(b, b + out, y + i * out);
  Gemm(info.Env(), m, 'N', 'T', n, out, in, x, in, w, in, 1.0f, y, out);
  return info.Env().Undefined();
}

// linearBackward(x, w, dy, dx | null, dw, db, [N, I, O]): dx = dy w, dw = dy^T x, db = sum_n dy.
Napi::Value LinearBackward(const Napi::CallbackInfo& info) {
  const char* m = "linearBackward";
  std::vector<int> d = DimsArg(info, 6, m, "shape", 3);
  size_t n = d[0], in = d[1], out = d[2];
  float* x = FloatArg(info, 0, m, "x", n * in);
  float* w = FloatArg(info, 1, m, "w", out * in);
  float* dy = FloatArg(info, 2, m, "dy", n * out);
  float* dx = info[3].IsNull() ? nullptr : FloatArg(info, 3, m, "dx", n * in);
  float* dw = FloatArg(info, 4, m, "dw", out * in);
  float* db = FloatArg(info, 5, m, "db", out);
  if (dx != nullptr) {
    Gemm(info.Env(), m, 'N', 'N', n, in, out, dy, out, w, in, 0.0f, dx, in);
  }
  Gemm(info.Env(), m, 'T', 'N', out, in, n, dy, out, x, in, 0.0f, dw, in);
  // Bias gradient in a fixed order (sample by sample) so that it is the same bits every time.
  std::fill(db, db + out, 0.0f);
  for (size_t i = 0; i < n; ++i) {
    for (size_t o = 0; o < out; ++o) db[o] += dy[i * out + o];
  }
  return info.Env().Undefined();
}

}  // namespace ft::cpu
