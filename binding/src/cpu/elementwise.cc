// Element-wise kernels: ReLU, in-place add, dropout's mask and the product that applies it, softmax
// + cross-entropy, and the optimizers' updates (SGD with momentum and weight decay, AdamW), each
// with the part that advances its state alone ("replay"), which sharded state uses to rebuild a
// lost chunk's state from a copy of the chunk's previous state and the step's input.
// Plain loops in a fixed order: the same inputs give the same bits. The long element-wise ones
// split their range over setThreads()'s OpenMP threads (each element still computed alone, so the
// bits do not depend on the thread count).
#include <cmath>
#include <string>

#include "counter_draw.h"
#include "cpu_kernels.h"
#include "optimizer_args.h"
#include "tensor_args.h"

namespace ft::cpu {

namespace {
// Below this many elements a parallel region costs more than it saves.
constexpr size_t kParallelFrom = size_t{1} << 15;
}  // namespace

// reluForward(x, y): y = max(x, 0).
Napi::Value ReluForward(const Napi::CallbackInfo& info) {
  auto [x, n] = FloatSpanArg(info, 0, "reluForward", "x");
  float* y = FloatArg(info, 1, "reluForward", "y", n);
#pragma omp parallel for schedule(static) if (n >= kParallelFrom)
  for (size_t i = 0; i < n; ++i) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
  return info.Env().Undefined();
}

// reluBackward(x, dy, dx): dx = dy where x > 0, else 0.
Napi::Value ReluBackward(const Napi::CallbackInfo& info) {
  auto [x, n] = FloatSpanArg(info, 0, "reluBackward", "x");
  const float* dy = FloatArg(info, 1, "reluBackward", "dy", n);
  float* dx = FloatArg(info, 2, "reluBackward", "dx", n);
  // dy[i] read unconditionally: a select of two loaded values vectorizes, a conditional load
  // compiles to a branch that random signs mispredict half the time (70x slower)
#pragma omp parallel for schedule(static) if (n >= kParallelFrom)
  for (size_t i = 0; i < n; ++i) {
    float gradient = dy[i];
    dx[i] = x[i] > 0.0f ? gradient : 0.0f;
  }
  return info.Env().Undefined();
}

// addInPlace(acc, x): acc += x, element by element (IEEE float adds: the same bits as any other
// correctly rounded float32 sum of the same two numbers).
Napi::Value AddInPlace(const Napi::CallbackInfo& info) {
  auto [acc, n] = FloatSpanArg(info, 0, "addInPlace", "acc");
  const float* x = FloatArg(info, 1, "addInPlace", "x", n);
#pragma omp parallel for schedule(static) if (n >= kParallelFrom)
  for (size_t i = 0; i < n; ++i) acc[i] += x[i];
  return info.Env().Undefined();
}

// dropoutMask(mask, p, keys): mask[i] = 0 where uniform(...keys, i) < p (src/base/random.ts's draw),
// else 1 / (1 - p) rounded to float: inverted dropout's mask, a pure function of the keys.
Napi::Value DropoutMask(const Napi::CallbackInfo& info) {
  auto [mask, n] = FloatSpanArg(info, 0, "dropoutMask", "mask");
  const DropoutDraw draw = DropoutArgs(info, 1, "dropoutMask");
  const float scale = static_cast<float>(1.0 / (1.0 - draw.p));
#pragma omp parallel for schedule(static) if (n >= kParallelFrom)
  for (size_t i = 0; i < n; ++i) mask[i] = DrawAt(draw.prefix, static_cast<uint32_t>(i)) < draw.p ? 0.0f : scale;
  return info.Env().Undefined();
}

// multiply(a, b, y): y = a b, element by element.
Napi::Value Multiply(const Napi::CallbackInfo& info) {
  auto [a, n] = FloatSpanArg(info, 0, "multiply", "a");
  const float* b = FloatArg(info, 1, "multiply", "b", n);
  float* y = FloatArg(info, 2, "multiply", "y", n);
#pragma omp parallel for schedule(static) if (n >= kParallelFrom)
  for (size_t i = 0; i < n; ++i) y[i] = a[i] * b[i];
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

// sgdUpdate(params, grads, velocity, lr, momentum, weightDecay[, paramsOut, velocityOut]):
//   v = momentum * v + (g + weightDecay * p);  p -= lr * v   (Caffe's and PyTorch's SGD;
//   optimizer_math.h, shared with the GPU).
// Given the outputs, the updated values go there and the inputs stay as they were (sharded state
// updates before the step's vote, into buffers that only the commit adopts); an output is either
// its input or does not overlap it.
Napi::Value SgdUpdate(const Napi::CallbackInfo& info) {
  const char* m = "sgdUpdate";
  auto [p, n] = FloatSpanArg(info, 0, m, "params");
  const float* g = FloatArg(info, 1, m, "grads", n);
  float* v = FloatArg(info, 2, m, "velocity", n);
  const SgdScalars s = SgdArgs(info, 3, m);
  bool outOfPlace = OutputsGiven(info, 6, 2, m);
  float* pOut = outOfPlace ? FloatArg(info, 6, m, "paramsOut", n) : p;
  float* vOut = outOfPlace ? FloatArg(info, 7, m, "velocityOut", n) : v;
#pragma omp parallel for schedule(static) if (n >= kParallelFrom)
  for (size_t i = 0; i < n; ++i) {
    float velocity = SgdVelocity(s, v[i], SgdMomentumInput(s, p[i], g[i]));
    vOut[i] = velocity;
    pOut[i] = SgdParam(s, p[i], velocity);
  }
  return info.Env().Undefined();
}

// sgdStateInput(params, grads, weightDecay, input): input = g + weightDecay * p, what the SGD
// update adds to the momentum (the same float operations as sgdUpdate, so the same bits).
Napi::Value SgdStateInput(const Napi::CallbackInfo& info) {
  const char* m = "sgdStateInput";
  auto [p, n] = FloatSpanArg(info, 0, m, "params");
  const float* g = FloatArg(info, 1, m, "grads", n);
  const SgdScalars s{0.0f, 0.0f, static_cast<float>(NumberArg(info, 2, m, "weightDecay"))};
  float* input = FloatArg(info, 3, m, "input", n);
  for (size_t i = 0; i < n; ++i) input[i] = SgdMomentumInput(s, p[i], g[i]);
  return info.Env().Undefined();
}

// sgdReplay(velocity, input, momentum): v = momentum * v + input, sgdUpdate's momentum step.
Napi::Value SgdReplay(const Napi::CallbackInfo& info) {
  const char* m = "sgdReplay";
  auto [v, n] = FloatSpanArg(info, 0, m, "velocity");
  const float* input = FloatArg(info, 1, m, "input", n);
  const SgdScalars s{0.0f, static_cast<float>(NumberArg(info, 2, m, "momentum")), 0.0f};
  for (size_t i = 0; i < n; ++i) v[i] = SgdVelocity(s, v[i], input[i]);
  return info.Env().Undefined();
}

// adamwUpdate(params, grads, m, v, lr, beta1, beta2, eps, weightDecay, step[, paramsOut, mOut,
// vOut]), PyTorch's AdamW (decoupled weight decay, bias correction; step counts from 1), in
// float32 like PyTorch's CPU kernels, with the scalars worked out in double first as PyTorch does
// (optimizer_math.h). Outputs as in sgdUpdate.
Napi::Value AdamwUpdate(const Napi::CallbackInfo& info) {
  const char* name = "adamwUpdate";
  auto [p, n] = FloatSpanArg(info, 0, name, "params");
  const float* g = FloatArg(info, 1, name, "grads", n);
  float* m = FloatArg(info, 2, name, "m", n);
  float* v = FloatArg(info, 3, name, "v", n);
  const AdamwScalars s = AdamwArgs(info, 4, name);
  bool outOfPlace = OutputsGiven(info, 10, 3, name);
  float* pOut = outOfPlace ? FloatArg(info, 10, name, "paramsOut", n) : p;
  float* mOut = outOfPlace ? FloatArg(info, 11, name, "mOut", n) : m;
  float* vOut = outOfPlace ? FloatArg(info, 12, name, "vOut", n) : v;
  for (size_t i = 0; i < n; ++i) {
    float first = m[i], second = v[i];
    pOut[i] = AdamwParam(s, p[i], first, second, g[i]);
    mOut[i] = first;
    vOut[i] = second;
  }
  return info.Env().Undefined();
}

// adamwReplay(m, v, grads, beta1, beta2): adamwUpdate's moment updates alone.
Napi::Value AdamwReplay(const Napi::CallbackInfo& info) {
  const char* name = "adamwReplay";
  auto [m, n] = FloatSpanArg(info, 0, name, "m");
  float* v = FloatArg(info, 1, name, "v", n);
  const float* g = FloatArg(info, 2, name, "grads", n);
  const AdamMoments moments = AdamMomentsArgs(info, 3, name);
  for (size_t i = 0; i < n; ++i) AdamAdvance(moments, m[i], v[i], g[i]);
  return info.Env().Undefined();
}

}  // namespace ft::cpu
