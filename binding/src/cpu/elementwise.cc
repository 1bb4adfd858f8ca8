// Element-wise kernels: ReLU, in-place add, softmax + cross-entropy, and the SGD update (momentum,
// weight decay).
// Plain loops in a fixed order: the same inputs give the same bits.
#include <cmath>
#include <string>

#include "cpu_kernels.h"
#include "tensor_args.h"

namespace ft::cpu {

// reluForward(x, y): y = max(x, 0).
Napi::Value ReluForward(const Napi::CallbackInfo& info) {
  auto [x, n] = FloatSpanArg(info, 0, "reluForward", "x");
  float* y = FloatArg(info, 1, "reluForward", "y", n);
  for (size_t i = 0; i < n; ++i) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
  return info.Env().Undefined();
}

// reluBackward(x, dy, dx): dx = dy where x > 0, else 0.
Napi::Value ReluBackward(const Napi::CallbackInfo& info) {
  auto [x, n] = FloatSpanArg(info, 0, "reluBackward", "x");
  const float* dy = FloatArg(info, 1, "reluBackward", "dy", n);
  float* dx = FloatArg(info, 2, "reluBackward", "dx", n);
  for (size_t i = 0; i < n; ++i) dx[i] = x[i] > 0.0f ? dy[i] : 0.0f;
  return info.Env().Undefined();
}

// addInPlace(acc, x): acc += x, element by element (IEEE float adds: the same bits as any other
// correctly rounded float32 sum of the same two numbers).
Napi::Value AddInPlace(const Napi::CallbackInfo& info) {
  auto [acc, n] = FloatSpanArg(info, 0, "addInPlace", "acc");
  const float* x = FloatArg(info, 1, "addInPlace", "x", n);
  for (size_t i = 0; i < n; ++i) acc[i] += x[i];
  return info.Env().Undefined();
}

// softmaxCrossEntropy(logits, labels, dlogits, [N, C]) -> mean loss over the N samples;
// dlogits = (softmax(logits) - onehot(labels)) / N.
Napi::Value SoftmaxCrossEntropy(const Napi::CallbackInfo& info) {
  const char* m = "softmaxCrossEntropy";
  std::vector<int> d = DimsArg(info, 3, m, "shape", 2);
  size_t n = d[0], c = d[1];
  const float* logits = FloatArg(info, 0, m, "logits", n * c);
  const int32_t* labels = IntArrayArg(info, 1, m, "labels", n);
  float* dlogits = FloatArg(info, 2, m, "dlogits", n * c);
  double loss = 0.0;
  for (size_t i = 0; i < n; ++i) {
    if (labels[i] < 0 || static_cast<size_t>(labels[i]) >= c) {
      throw Napi::RangeError::New(info.Env(), std::string(m) + ": labels[" + std::to_string(i) +
                                                  "] is " + std::to_string(labels[i]) +
                                                  ", outside 0.." + std::to_string(c - 1));
    }
    const float* row = logits + i * c;
    float* grad = dlogits + i * c;
    // In double throughout: the shift by the max keeps exp() in range, the double keeps the bits.
    double max = row[0];
    for (size_t j = 1; j < c; ++j) max = std::max(max, static_cast<double>(row[j]));
    double sum = 0.0;
    for (size_t j = 0; j < c; ++j) sum += std::exp(row[j] - max);
    double logSum = std::log(sum);
    loss += logSum - (row[labels[i]] - max);
    for (size_t j = 0; j < c; ++j) {
      double p = std::exp(row[j] - max - logSum);
      grad[j] = static_cast<float>((p - (static_cast<int32_t>(j) == labels[i] ? 1.0 : 0.0)) / n);
    }
  }
  return Napi::Number::New(info.Env(), loss / n);
}

// sgdUpdate(params, grads, velocity, lr, momentum, weightDecay):
//   v = momentum * v + (g + weightDecay * p);  p -= lr * v   (Caffe's and PyTorch's SGD).
Napi::Value SgdUpdate(const Napi::CallbackInfo& info) {
  const char* m = "sgdUpdate";
  auto [p, n] = FloatSpanArg(info, 0, m, "params");
  const float* g = FloatArg(info, 1, m, "grads", n);
  float* v = FloatArg(info, 2, m, "velocity", n);
  float lr = static_cast<float>(NumberArg(info, 3, m, "lr"));
  float momentum = static_cast<float>(NumberArg(info, 4, m, "momentum"));
  float decay = static_cast<float>(NumberArg(info, 5, m, "weightDecay"));
  for (size_t i = 0; i < n; ++i) {
    v[i] = momentum * v[i] + (g[i] + decay * p[i]);
    p[i] -= lr * v[i];
  }
  return info.Env().Undefined();
}

}  // namespace ft::cpu
