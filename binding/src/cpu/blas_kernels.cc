// Fully connected layers on OpenBLAS: y[N,O] = x[N,I] w[O,I]^T + b[O], and its gradients.
#include <cblas.h>

#include "cpu_kernels.h"
#include "tensor_args.h"

namespace ft::cpu {

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
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, out, in, 1.0f, x, in, w, in, 1.0f, y, out);
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
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, in, out, 1.0f, dy, out, w, in, 0.0f, dx, in);
  }
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, out, in, n, 1.0f, dy, out, x, in, 0.0f, dw, in);
  // Bias gradient in a fixed order (sample by sample) so that it is the same bits every time.
  std::fill(db, db + out, 0.0f);
  for (size_t i = 0; i < n; ++i) {
    for (size_t o = 0; o < out; ++o) db[o] += dy[i * out + o];
  }
  return info.Env().Undefined();
}

}  // namespace ft::cpu
