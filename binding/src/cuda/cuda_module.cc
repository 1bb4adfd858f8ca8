// The `cuda` object of the addon: argument checks as the CPU kernels make them (tensor_args.h),
// then the same work on the arrays' device mirrors.
#include "cuda_module.h"

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "args.h"
#include "cpu/optimizer_args.h"
#include "cpu/tensor_args.h"
#include "cuda_check.h"
#include "device_memory.h"
#include "dnn.h"
#include "kernels.h"

namespace ft::cuda {

using cpu::BytesArg;
using cpu::DimsArg;
using cpu::FloatArg;
using cpu::FloatSpanArg;
using cpu::IntArrayArg;
using cpu::LayoutArg;
using cpu::NumberArg;

namespace {
// The device mirror of argument `index`, an array already checked.
template <typename T = float>
T* Dev(const Napi::CallbackInfo& info, size_t index) {
  return MirrorOf<T>(info[index].As<Napi::TypedArray>());
}

// The device mirror of argument `index`, checked as the CPU kernels check it: a Float32Array of `count` elements.
float* DevArg(const Napi::CallbackInfo& info, size_t index, const char* method, const char* name, size_t count) {
  FloatArg(info, index, method, name, count);
  return Dev(info, index);
}

size_t Product(const std::vector<int>& d, size_t from, size_t to) {
  size_t p = 1;
  for (size_t i = from; i < to; ++i) p *= static_cast<size_t>(d[i]);
  return p;
}

// The CPU's shape check, and square kernels, as the layers make them.
std::vector<int> ConvDims(const Napi::CallbackInfo& info, size_t index, const char* method) {
  std::vector<int> d = cpu::ConvShapeArg(info, index, method);
  if (d[5] != d[6]) {
    ThrowArg(info.Env(), method, "shape", "[N, C, H, W, K, R, S, stride, pad] with the kernel inside the padded input",
             info[index]);
  }
  return d;
}

// conv2dForward(x, w, b, y, shape, xLayout?, yLayout?): the blocked layout is plain here (channelBlock 1).
Napi::Value Conv2dForward(const Napi::CallbackInfo& info) {
  const char* m = "conv2dForward";
  auto d = ConvDims(info, 4, m);
  LayoutArg(info, 5, m, "xLayout");
  LayoutArg(info, 6, m, "yLayout");
  auto out = ConvOutput(d);
  const size_t xs = Product(d, 0, 4), ws = Product(d, 4, 7) * d[1], ys = size_t(d[0]) * d[4] * out[0] * out[1];
  ConvForward(d, DevArg(info, 0, m, "x", xs), DevArg(info, 1, m, "w", ws),
              DevArg(info, 2, m, "b", d[4]), DevArg(info, 3, m, "y", ys));
  return info.Env().Undefined();
}

Napi::Value Conv2dBackwardData(const Napi::CallbackInfo& info) {
  const char* m = "conv2dBackwardData";
  auto d = ConvDims(info, 3, m);
  LayoutArg(info, 4, m, "xLayout");
  LayoutArg(info, 5, m, "yLayout");
  auto out = ConvOutput(d);
  const size_t xs = Product(d, 0, 4), ws = Product(d, 4, 7) * d[1], ys = size_t(d[0]) * d[4] * out[0] * out[1];
  ConvBackwardData(d, DevArg(info, 0, m, "dy", ys), DevArg(info, 1, m, "w", ws),
                   DevArg(info, 2, m, "dx", xs));
  return info.Env().Undefined();
}

Napi::Value Conv2dBackwardWeights(const Napi::CallbackInfo& info) {
  const char* m = "conv2dBackwardWeights";
  auto d = ConvDims(info, 4, m);
  LayoutArg(info, 5, m, "xLayout");
  LayoutArg(info, 6, m, "yLayout");
  auto out = ConvOutput(d);
  const size_t xs = Product(d, 0, 4), ws = Product(d, 4, 7) * d[1], ys = size_t(d[0]) * d[4] * out[0] * out[1];
  ConvBackwardWeights(d, DevArg(info, 0, m, "x", xs), DevArg(info, 1, m, "dy", ys),
                      DevArg(info, 2, m, "dw", ws), DevArg(info, 3, m, "db", d[4]));
  return info.Env().Undefined();
}

PoolGeometry PoolArg(const Napi::CallbackInfo& info, size_t index, const char* method) {
  std::vector<int> d = cpu::PoolShapeArg(info, index, method);
  return PoolGeometry{d[0], d[1], d[2], d[3], d[4], d[5], d[6], (d[2] + 2 * d[6] - d[4]) / d[5] + 1,
                      (d[3] + 2 * d[6] - d[4]) / d[5] + 1};
}

size_t Inputs(const PoolGeometry& g) { return size_t(g.n) * g.c * g.h * g.w; }
size_t Outputs(const PoolGeometry& g) { return size_t(g.n) * g.c * g.oh * g.ow; }

// pool2dWorkspaceBytes(kind, shape, layout?): max pooling keeps each output's argmax (int32).
Napi::Value Pool2dWorkspaceBytes(const Napi::CallbackInfo& info) {
  const char* m = "pool2dWorkspaceBytes";
  bool max = cpu::MaxPoolingArg(info, m);
  PoolGeometry g = PoolArg(info, 1, m);
  LayoutArg(info, 2, m, "layout");
  return Napi::Number::New(info.Env(), max ? static_cast<double>(Outputs(g) * sizeof(int32_t)) : 0.0);
}

Napi::Value Pool2dForward(const Napi::CallbackInfo& info) {
  const char* m = "pool2dForward";
  bool max = cpu::MaxPoolingArg(info, m);
  PoolGeometry g = PoolArg(info, 4, m);
  LayoutArg(info, 5, m, "layout");
  const float* x = DevArg(info, 1, m, "x", Inputs(g));
  float* y = DevArg(info, 2, m, "y", Outputs(g));
  if (max) {
    BytesArg(info, 3, m, "workspace", Outputs(g) * sizeof(int32_t));
    MaxPoolForward(x, y, Dev<int32_t>(info, 3), g);
  } else {
    AvgPoolForward(x, y, g);
  }
  return info.Env().Undefined();
}

Napi::Value Pool2dBackward(const Napi::CallbackInfo& info) {
  const char* m = "pool2dBackward";
  bool max = cpu::MaxPoolingArg(info, m);
  PoolGeometry g = PoolArg(info, 4, m);
  LayoutArg(info, 5, m, "layout");
  const float* dy = DevArg(info, 1, m, "dy", Outputs(g));
  float* dx = DevArg(info, 2, m, "dx", Inputs(g));
  if (max) {
    BytesArg(info, 3, m, "workspace", Outputs(g) * sizeof(int32_t));
    MaxPoolBackward(dy, dx, Dev<int32_t>(info, 3), g);
  } else {
    AvgPoolBackward(dy, dx, g);
  }
  return info.Env().Undefined();
}

// convertLayout(x, y, [N, C, H, W], to): with channelBlock 1 both layouts are NCHW, so a copy.
Napi::Value ConvertLayout(const Napi::CallbackInfo& info) {
  const char* m = "convertLayout";
  std::vector<int> d = DimsArg(info, 2, m, "shape", 4);
  LayoutArg(info, 3, m, "to");
  const size_t n = Product(d, 0, 4);
  const float* x = DevArg(info, 0, m, "x", n);
  float* y = DevArg(info, 1, m, "y", n);
  FT_CUDA_CHECK(cudaMemcpy(y, x, n * sizeof(float), cudaMemcpyDeviceToDevice));
  return info.Env().Undefined();
}

Napi::Value LinearForwardValue(const Napi::CallbackInfo& info) {
  const char* m = "linearForward";
  std::vector<int> d = DimsArg(info, 4, m, "shape", 3);
  const size_t n = d[0], in = d[1], out = d[2];
  LinearForward(d[0], d[1], d[2], DevArg(info, 0, m, "x", n * in),
                DevArg(info, 1, m, "w", out * in), DevArg(info, 2, m, "b", out),
                DevArg(info, 3, m, "y", n * out));
  return info.Env().Undefined();
}

Napi::Value LinearBackwardValue(const Napi::CallbackInfo& info) {
  const char* m = "linearBackward";
  std::vector<int> d = DimsArg(info, 6, m, "shape", 3);
  const size_t n = d[0], in = d[1], out = d[2];
  float* dx = info[3].IsNull() ? nullptr : DevArg(info, 3, m, "dx", n * in);
  LinearBackward(d[0], d[1], d[2], DevArg(info, 0, m, "x", n * in),
                 DevArg(info, 1, m, "w", out * in), DevArg(info, 2, m, "dy", n * out),
                 dx, DevArg(info, 4, m, "dw", out * in), DevArg(info, 5, m, "db", out));
  return info.Env().Undefined();
}

// An element-wise activation: method(x, y) runs forward(x, y, n); method(x, dy, dx) runs
// backward(x, dy, dx, n), x giving n.
Napi::Value ActivationValue(const Napi::CallbackInfo& info, const char* method, void (*forward)(const float*, float*, size_t)) {
  size_t n = FloatSpanArg(info, 0, method, "x").length;
  forward(Dev(info, 0), DevArg(info, 1, method, "y", n), n);
  return info.Env().Undefined();
}

Napi::Value ActivationGradientValue(const Napi::CallbackInfo& info, const char* method,
                                    void (*backward)(const float*, const float*, float*, size_t)) {
  size_t n = FloatSpanArg(info, 0, method, "x").length;
  float* dy = DevArg(info, 1, method, "dy", n);
  backward(Dev(info, 0), dy, DevArg(info, 2, method, "dx", n), n);
  return info.Env().Undefined();
}

Napi::Value ReluForwardValue(const Napi::CallbackInfo& info) { return ActivationValue(info, "reluForward", ReluForward); }

Napi::Value ReluBackwardValue(const Napi::CallbackInfo& info) {
  return ActivationGradientValue(info, "reluBackward", ReluBackward);
}

Napi::Value AddInPlaceValue(const Napi::CallbackInfo& info) {
  size_t n = FloatSpanArg(info, 0, "addInPlace", "acc").length;
  AddInPlace(Dev(info, 0), DevArg(info, 1, "addInPlace", "x", n), n);
  return info.Env().Undefined();
}

Napi::Value ScaleInPlaceValue(const Napi::CallbackInfo& info) {
  size_t n = FloatSpanArg(info, 0, "scaleInPlace", "x").length;
  ScaleInPlace(Dev(info, 0), static_cast<float>(NumberArg(info, 1, "scaleInPlace", "scale")), n);
  return info.Env().Undefined();
}

// [N, C, S] of a normalisation or global pooling (the blocked layout is plain here).
NormGeometry NormArg(const Napi::CallbackInfo& info, size_t index, const char* method) {
  std::vector<int> d = DimsArg(info, index, method, "shape", 3);
  LayoutArg(info, index + 1, method, "layout");
  return NormGeometry{static_cast<size_t>(d[0]), static_cast<size_t>(d[1]), static_cast<size_t>(d[2])};
}

size_t Values(const NormGeometry& g) { return g.n * g.c * g.s; }

// batchnormForwardTrain(x, w, b, y, xhat, mean, unbiased, invStd, eps, shape, layout?): mean and
// unbiased come back to their host arrays as well (the layer reads them there, for the running
// statistics); invStd stays on the device for the backward pass.
Napi::Value BatchnormForwardTrainValue(const Napi::CallbackInfo& info) {
  const char* m = "batchnormForwardTrain";
  NormGeometry g = NormArg(info, 9, m);
  float* x = DevArg(info, 0, m, "x", Values(g));
  float* w = DevArg(info, 1, m, "w", g.c);
  float* b = DevArg(info, 2, m, "b", g.c);
  float* y = DevArg(info, 3, m, "y", Values(g));
  float* xhat = DevArg(info, 4, m, "xhat", Values(g));
  double* meanHost = cpu::DoubleArg(info, 5, m, "mean", g.c);
  double* unbiasedHost = cpu::DoubleArg(info, 6, m, "unbiased", g.c);
  cpu::DoubleArg(info, 7, m, "invStd", g.c);
  double eps = cpu::EpsArg(info, 8, m);
  double* mean = Dev<double>(info, 5);
  double* unbiased = Dev<double>(info, 6);
  BatchnormForwardTrain(x, w, b, y, xhat, mean, unbiased, Dev<double>(info, 7), eps, g);
  FT_CUDA_CHECK(cudaMemcpy(meanHost, mean, g.c * sizeof(double), cudaMemcpyDeviceToHost));
  FT_CUDA_CHECK(cudaMemcpy(unbiasedHost, unbiased, g.c * sizeof(double), cudaMemcpyDeviceToHost));
  return info.Env().Undefined();
}

Napi::Value BatchnormForwardEvalValue(const Napi::CallbackInfo& info) {
  const char* m = "batchnormForwardEval";
  NormGeometry g = NormArg(info, 7, m);
  float* x = DevArg(info, 0, m, "x", Values(g));
  float* w = DevArg(info, 1, m, "w", g.c);
  float* b = DevArg(info, 2, m, "b", g.c);
  float* runningMean = DevArg(info, 3, m, "runningMean", g.c);
  float* runningVar = DevArg(info, 4, m, "runningVar", g.c);
  float* y = DevArg(info, 5, m, "y", Values(g));
  BatchnormForwardEval(x, w, b, runningMean, runningVar, y, cpu::EpsArg(info, 6, m), g);
  return info.Env().Undefined();
}

Napi::Value BatchnormBackwardValue(const Napi::CallbackInfo& info) {
  const char* m = "batchnormBackward";
  NormGeometry g = NormArg(info, 7, m);
  float* dy = DevArg(info, 0, m, "dy", Values(g));
  float* xhat = DevArg(info, 1, m, "xhat", Values(g));
  float* w = DevArg(info, 2, m, "w", g.c);
  cpu::DoubleArg(info, 3, m, "invStd", g.c);
  float* dx = info[4].IsNull() ? nullptr : DevArg(info, 4, m, "dx", Values(g));
  float* dw = DevArg(info, 5, m, "dw", g.c);
  float* db = DevArg(info, 6, m, "db", g.c);
  BatchnormBackward(dy, xhat, w, Dev<double>(info, 3), dx, dw, db, g);
  return info.Env().Undefined();
}

Napi::Value GlobalAvgPoolForwardValue(const Napi::CallbackInfo& info) {
  const char* m = "globalAvgPoolForward";
  NormGeometry g = NormArg(info, 2, m);
  float* x = DevArg(info, 0, m, "x", Values(g));
  GlobalAvgPoolForward(x, DevArg(info, 1, m, "y", g.n * g.c), g);
  return info.Env().Undefined();
}

Napi::Value GlobalAvgPoolBackwardValue(const Napi::CallbackInfo& info) {
  const char* m = "globalAvgPoolBackward";
  NormGeometry g = NormArg(info, 2, m);
  float* dy = DevArg(info, 0, m, "dy", g.n * g.c);
  GlobalAvgPoolBackward(dy, DevArg(info, 1, m, "dx", Values(g)), g);
  return info.Env().Undefined();
}

// The transformer's kernels (transformer.cu): arguments checked as the CPU's (cpu/transformer.cc).
AttentionGeometry AttentionArg(const Napi::CallbackInfo& info, size_t index, const char* method) {
  std::vector<int> d = DimsArg(info, index, method, "shape", 4);
  return AttentionGeometry{static_cast<size_t>(d[0]), static_cast<size_t>(d[1]), static_cast<size_t>(d[2]),
                           static_cast<size_t>(d[3])};
}

Napi::Value AttentionForwardValue(const Napi::CallbackInfo& info) {
  const char* m = "attentionForward";
  AttentionGeometry g = AttentionArg(info, 3, m);
  const size_t c = g.h * g.d;
  float* qkv = DevArg(info, 0, m, "qkv", g.n * g.t * 3 * c);
  float* att = DevArg(info, 1, m, "att", g.n * g.h * g.t * g.t);
  AttentionForward(qkv, att, DevArg(info, 2, m, "y", g.n * g.t * c), g);
  return info.Env().Undefined();
}

Napi::Value AttentionBackwardValue(const Napi::CallbackInfo& info) {
  const char* m = "attentionBackward";
  AttentionGeometry g = AttentionArg(info, 4, m);
  const size_t c = g.h * g.d;
  float* qkv = DevArg(info, 0, m, "qkv", g.n * g.t * 3 * c);
  float* att = DevArg(info, 1, m, "att", g.n * g.h * g.t * g.t);
  float* dy = DevArg(info, 2, m, "dy", g.n * g.t * c);
  AttentionBackward(qkv, att, dy, DevArg(info, 3, m, "dqkv", g.n * g.t * 3 * c), g);
  return info.Env().Undefined();
}

Napi::Value GeluForwardValue(const Napi::CallbackInfo& info) { return ActivationValue(info, "geluForward", GeluForward); }

Napi::Value GeluBackwardValue(const Napi::CallbackInfo& info) {
  return ActivationGradientValue(info, "geluBackward", GeluBackward);
}

Napi::Value LayernormForwardValue(const Napi::CallbackInfo& info) {
  const char* m = "layernormForward";
  std::vector<int> dims = DimsArg(info, 7, m, "shape", 2);
  const size_t n = dims[0], d = dims[1];
  float* x = DevArg(info, 0, m, "x", n * d);
  float* w = DevArg(info, 1, m, "w", d);
  float* b = DevArg(info, 2, m, "b", d);
  float* y = DevArg(info, 3, m, "y", n * d);
  float* xhat = DevArg(info, 4, m, "xhat", n * d);
  cpu::DoubleArg(info, 5, m, "invStd", n);
  LayernormForward(x, w, b, y, xhat, Dev<double>(info, 5), cpu::EpsArg(info, 6, m), n, d);
  return info.Env().Undefined();
}

Napi::Value LayernormBackwardValue(const Napi::CallbackInfo& info) {
  const char* m = "layernormBackward";
  std::vector<int> dims = DimsArg(info, 7, m, "shape", 2);
  const size_t n = dims[0], d = dims[1];
  float* dy = DevArg(info, 0, m, "dy", n * d);
  float* xhat = DevArg(info, 1, m, "xhat", n * d);
  float* w = DevArg(info, 2, m, "w", d);
  cpu::DoubleArg(info, 3, m, "invStd", n);
  float* dx = info[4].IsNull() ? nullptr : DevArg(info, 4, m, "dx", n * d);
  float* dw = DevArg(info, 5, m, "dw", d);
  float* db = DevArg(info, 6, m, "db", d);
  LayernormBackward(dy, xhat, w, Dev<double>(info, 3), dx, dw, db, n, d);
  return info.Env().Undefined();
}

// The shape [N, T, C, V] at `index` and the stride of x's rows at argument 1.
EmbeddingGeometry EmbeddingArg(const Napi::CallbackInfo& info, size_t index, const char* method) {
  std::vector<int> d = DimsArg(info, index, method, "shape", 4);
  const size_t stride = IntArg(info, 1, method, "stride", d[1], INT_MAX);
  return EmbeddingGeometry{static_cast<size_t>(d[0]), static_cast<size_t>(d[1]), static_cast<size_t>(d[2]),
                           static_cast<size_t>(d[3]), stride};
}

// The token ids of x on the device, every one checked before anything is written: the CPU's RangeError for the first bad one.
const int32_t* DeviceTokens(const Napi::CallbackInfo& info, const char* method, const EmbeddingGeometry& g) {
  int32_t* tokens = nullptr;
  const float* x = DevArg(info, 0, method, "x", g.n * g.stride);
  const int64_t bad = Tokens(x, g, &tokens);
  if (bad >= 0) {
    const size_t s = bad / g.t, t = bad % g.t, at = s * g.stride + t;
    float value = 0.0f;
    FT_CUDA_CHECK(cudaMemcpy(&value, x + at, sizeof value, cudaMemcpyDeviceToHost));
    throw cpu::BadTokenError(info.Env(), method, s, t, at, value, g.vocab);
  }
  return tokens;
}

Napi::Value EmbeddingForwardValue(const Napi::CallbackInfo& info) {
  const char* m = "embeddingForward";
  EmbeddingGeometry g = EmbeddingArg(info, 5, m);
  float* wte = DevArg(info, 2, m, "wte", g.vocab * g.c);
  float* wpe = DevArg(info, 3, m, "wpe", g.t * g.c);
  float* y = DevArg(info, 4, m, "y", g.n * g.t * g.c);
  EmbeddingForward(DeviceTokens(info, m, g), wte, wpe, y, g);
  return info.Env().Undefined();
}

Napi::Value EmbeddingBackwardValue(const Napi::CallbackInfo& info) {
  const char* m = "embeddingBackward";
  EmbeddingGeometry g = EmbeddingArg(info, 5, m);
  float* dy = DevArg(info, 2, m, "dy", g.n * g.t * g.c);
  float* dwte = DevArg(info, 3, m, "dwte", g.vocab * g.c);
  float* dwpe = DevArg(info, 4, m, "dwpe", g.t * g.c);
  if (!info[6].IsBoolean()) ThrowArg(info.Env(), m, "accumulate", "a boolean", info[6]);
  const bool accumulate = info[6].As<Napi::Boolean>().Value();
  EmbeddingBackward(DeviceTokens(info, m, g), dy, dwte, dwpe, accumulate, g);
  return info.Env().Undefined();
}

Napi::Value DropoutMaskValue(const Napi::CallbackInfo& info) {
  size_t n = FloatSpanArg(info, 0, "dropoutMask", "mask").length;
  const cpu::DropoutDraw draw = cpu::DropoutArgs(info, 1, "dropoutMask");
  DropoutMask(Dev(info, 0), n, draw.prefix, draw.p);
  return info.Env().Undefined();
}

Napi::Value MultiplyValue(const Napi::CallbackInfo& info) {
  size_t n = FloatSpanArg(info, 0, "multiply", "a").length;
  float* b = DevArg(info, 1, "multiply", "b", n);
  Multiply(Dev(info, 0), b, DevArg(info, 2, "multiply", "y", n), n);
  return info.Env().Undefined();
}

// copy(x, y): y = x, device to device.
Napi::Value CopyValue(const Napi::CallbackInfo& info) {
  size_t n = FloatSpanArg(info, 0, "copy", "x").length;
  float* y = DevArg(info, 1, "copy", "y", n);
  float* x = Dev(info, 0);
  if (x != y) FT_CUDA_CHECK(cudaMemcpy(y, x, n * sizeof(float), cudaMemcpyDeviceToDevice));
  return info.Env().Undefined();
}

// The optimizers: arguments as the CPU's (cpu/optimizer_args.h), the same arithmetic (optimizer.cu).
Napi::Value SgdUpdateValue(const Napi::CallbackInfo& info) {
  const char* m = "sgdUpdate";
  size_t n = FloatSpanArg(info, 0, m, "params").length;
  float* p = Dev(info, 0);
  const float* g = DevArg(info, 1, m, "grads", n);
  float* v = DevArg(info, 2, m, "velocity", n);
  const SgdScalars s = cpu::SgdArgs(info, 3, m);
  bool outOfPlace = cpu::OutputsGiven(info, 6, 2, m);
  SgdUpdate(p, g, v, outOfPlace ? DevArg(info, 6, m, "paramsOut", n) : p, outOfPlace ? DevArg(info, 7, m, "velocityOut", n) : v, s, n);
  return info.Env().Undefined();
}

Napi::Value SgdStateInputValue(const Napi::CallbackInfo& info) {
  const char* m = "sgdStateInput";
  size_t n = FloatSpanArg(info, 0, m, "params").length;
  const float* g = DevArg(info, 1, m, "grads", n);
  const SgdScalars s{0.0f, 0.0f, static_cast<float>(NumberArg(info, 2, m, "weightDecay"))};
  SgdStateInput(Dev(info, 0), g, DevArg(info, 3, m, "input", n), s, n);
  return info.Env().Undefined();
}

Napi::Value SgdReplayValue(const Napi::CallbackInfo& info) {
  const char* m = "sgdReplay";
  size_t n = FloatSpanArg(info, 0, m, "velocity").length;
  const float* input = DevArg(info, 1, m, "input", n);
  const SgdScalars s{0.0f, static_cast<float>(NumberArg(info, 2, m, "momentum")), 0.0f};
  SgdReplay(Dev(info, 0), input, s, n);
  return info.Env().Undefined();
}

Napi::Value AdamwUpdateValue(const Napi::CallbackInfo& info) {
  const char* name = "adamwUpdate";
  size_t n = FloatSpanArg(info, 0, name, "params").length;
  float* p = Dev(info, 0);
  const float* g = DevArg(info, 1, name, "grads", n);
  float* m = DevArg(info, 2, name, "m", n);
  float* v = DevArg(info, 3, name, "v", n);
  const AdamwScalars s = cpu::AdamwArgs(info, 4, name);
  bool outOfPlace = cpu::OutputsGiven(info, 10, 3, name);
  float* pOut = outOfPlace ? DevArg(info, 10, name, "paramsOut", n) : p;
  float* mOut = outOfPlace ? DevArg(info, 11, name, "mOut", n) : m;
  float* vOut = outOfPlace ? DevArg(info, 12, name, "vOut", n) : v;
  AdamwUpdate(p, g, m, v, pOut, mOut, vOut, s, n);
  return info.Env().Undefined();
}

Napi::Value AdamwReplayValue(const Napi::CallbackInfo& info) {
  const char* name = "adamwReplay";
  size_t n = FloatSpanArg(info, 0, name, "m").length;
  float* v = DevArg(info, 1, name, "v", n);
  const float* g = DevArg(info, 2, name, "grads", n);
  AdamwReplay(Dev(info, 0), v, g, cpu::AdamMomentsArgs(info, 3, name), n);
  return info.Env().Undefined();
}

// softmaxCrossEntropy(logits, labels, dlogits, [N, C]) -> mean loss; labels (host) checked here,
// the row losses summed here in row order.
Napi::Value SoftmaxCrossEntropyValue(const Napi::CallbackInfo& info) {
  const char* m = "softmaxCrossEntropy";
  std::vector<int> d = DimsArg(info, 3, m, "shape", 2);
  const size_t n = d[0], c = d[1];
  FloatArg(info, 0, m, "logits", n * c);
  const int32_t* labels = IntArrayArg(info, 1, m, "labels", n);
  FloatArg(info, 2, m, "dlogits", n * c);
  for (size_t i = 0; i < n; ++i) {
    if (labels[i] < 0 || static_cast<size_t>(labels[i]) >= c) {
      throw Napi::RangeError::New(info.Env(), std::string(m) + ": labels[" + std::to_string(i) + "] is " +
                                                  std::to_string(labels[i]) + ", outside 0.." + std::to_string(c - 1));
    }
  }
  auto* deviceLabels = static_cast<int32_t*>(ScratchOf(Scratch::kLabels, n * sizeof(int32_t)));
  FT_CUDA_CHECK(cudaMemcpy(deviceLabels, labels, n * sizeof(int32_t), cudaMemcpyHostToDevice));
  auto* rowLoss = static_cast<double*>(ScratchOf(Scratch::kRowLoss, n * sizeof(double)));
  SoftmaxCrossEntropy(Dev(info, 0), deviceLabels, Dev(info, 2), rowLoss, n, c);
  std::vector<double> losses(n);
  FT_CUDA_CHECK(cudaMemcpy(losses.data(), rowLoss, n * sizeof(double), cudaMemcpyDeviceToHost));
  double loss = 0.0;
  for (double l : losses) loss += l;
  return Napi::Number::New(info.Env(), loss / n);
}

// upload(host, mirrored): host's values into the device mirror of `mirrored` (same length).
Napi::Value UploadValue(const Napi::CallbackInfo& info) {
  auto [host, n] = FloatSpanArg(info, 0, "upload", "host");
  FloatArg(info, 1, "upload", "mirrored", n);
  Upload(host, info[1].As<Napi::TypedArray>());
  return info.Env().Undefined();
}

// download(mirrored, host): the device mirror of `mirrored` into host's values.
Napi::Value DownloadValue(const Napi::CallbackInfo& info) {
  size_t n = FloatSpanArg(info, 0, "download", "mirrored").length;
  Download(info[0].As<Napi::TypedArray>(), FloatArg(info, 1, "download", "host", n));
  return info.Env().Undefined();
}

// hostArray(length): a zeroed Float32Array in page-locked host memory (freed with it), which
// uploads read by DMA straight away instead of through the driver's staging buffers.
Napi::Value HostArrayValue(const Napi::CallbackInfo& info) {
  const size_t n = static_cast<size_t>(IntArg(info, 0, "hostArray", "length", 0, INT32_MAX));
  Device();
  void* data = nullptr;
  FT_CUDA_CHECK(cudaMallocHost(&data, std::max<size_t>(n, 1) * sizeof(float)));
  std::memset(data, 0, n * sizeof(float));
  auto buffer = Napi::ArrayBuffer::New(info.Env(), data, n * sizeof(float), [](Napi::Env, void* memory) { cudaFreeHost(memory); });
  return Napi::Float32Array::New(info.Env(), n, buffer, 0);
}

// gpu(): { name, index, count, memoryBytes, freeBytes } of this process's GPU.
Napi::Value GpuValue(const Napi::CallbackInfo& info) {
  int index = Device(), count = 0;
  FT_CUDA_CHECK(cudaGetDeviceCount(&count));
  cudaDeviceProp prop;
  FT_CUDA_CHECK(cudaGetDeviceProperties(&prop, index));
  Napi::Object gpu = Napi::Object::New(info.Env());
  gpu.Set("name", std::string(prop.name));
  gpu.Set("index", index);
  gpu.Set("count", count);
  size_t freeBytes = 0, totalBytes = 0;
  FT_CUDA_CHECK(cudaMemGetInfo(&freeBytes, &totalBytes));
  gpu.Set("memoryBytes", static_cast<double>(totalBytes));
  gpu.Set("freeBytes", static_cast<double>(freeBytes));
  return gpu;
}

Napi::Value HeldBytesValue(const Napi::CallbackInfo& info) {
  return Napi::Number::New(info.Env(), static_cast<double>(HeldBytes()));
}

// The versions this build found, for the one line a build or a run prints.
Napi::Value LibrariesValue(const Napi::CallbackInfo& info) {
  int runtime = 0, nccl = 0;
  FT_CUDA_CHECK(cudaRuntimeGetVersion(&runtime));
  FT_CUDA_CHECK(ncclGetVersion(&nccl));
  Napi::Object versions = Napi::Object::New(info.Env());
  versions.Set("cudaRuntime", runtime);
  versions.Set("cudnn", static_cast<double>(cudnnGetVersion()));
  versions.Set("nccl", nccl);
  return versions;
}
}  // namespace

Napi::Object Exports(Napi::Env env) {
  Napi::Object cuda = Napi::Object::New(env);
  auto add = [&](const char* name, Napi::Function::Callback fn) { cuda.Set(name, Napi::Function::New(env, fn, name)); };
  add("gpu", GpuValue);
  add("libraries", LibrariesValue);
  add("heldBytes", HeldBytesValue);
  add("upload", UploadValue);
  add("download", DownloadValue);
  add("hostArray", HostArrayValue);
  add("conv2dForward", Conv2dForward);
  add("conv2dBackwardData", Conv2dBackwardData);
  add("conv2dBackwardWeights", Conv2dBackwardWeights);
  add("pool2dWorkspaceBytes", Pool2dWorkspaceBytes);
  add("pool2dForward", Pool2dForward);
  add("pool2dBackward", Pool2dBackward);
  add("convertLayout", ConvertLayout);
  add("linearForward", LinearForwardValue);
  add("linearBackward", LinearBackwardValue);
  add("reluForward", ReluForwardValue);
  add("reluBackward", ReluBackwardValue);
  add("addInPlace", AddInPlaceValue);
  add("scaleInPlace", ScaleInPlaceValue);
  add("softmaxCrossEntropy", SoftmaxCrossEntropyValue);
  add("batchnormForwardTrain", BatchnormForwardTrainValue);
  add("batchnormForwardEval", BatchnormForwardEvalValue);
  add("batchnormBackward", BatchnormBackwardValue);
  add("globalAvgPoolForward", GlobalAvgPoolForwardValue);
  add("globalAvgPoolBackward", GlobalAvgPoolBackwardValue);
  add("attentionForward", AttentionForwardValue);
  add("attentionBackward", AttentionBackwardValue);
  add("geluForward", GeluForwardValue);
  add("geluBackward", GeluBackwardValue);
  add("layernormForward", LayernormForwardValue);
  add("layernormBackward", LayernormBackwardValue);
  add("embeddingForward", EmbeddingForwardValue);
  add("embeddingBackward", EmbeddingBackwardValue);
  add("dropoutMask", DropoutMaskValue);
  add("multiply", MultiplyValue);
  add("copy", CopyValue);
  add("sgdUpdate", SgdUpdateValue);
  add("sgdStateInput", SgdStateInputValue);
  add("sgdReplay", SgdReplayValue);
  add("adamwUpdate", AdamwUpdateValue);
  add("adamwReplay", AdamwReplayValue);
  cuda.Set("channelBlock", Napi::Number::New(env, 1));
  AddNcclExports(env, cuda);
  return cuda;
}

}  // namespace ft::cuda
