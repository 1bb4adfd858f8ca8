// Argument checks for the CPU kernels: Float32Array (and Float64Array) views with an exact element count, and shape
// tuples, in the same message format as the communicator's checks.
#pragma once
#include <napi.h>

#include <vector>

namespace ft::cpu {

// The data of a Float32Array argument that must hold exactly `count` elements.
float* FloatArg(const Napi::CallbackInfo& info, size_t index, const char* method, const char* name,
                size_t count);

// The data of a Float64Array argument that must hold exactly `count` elements.
double* DoubleArg(const Napi::CallbackInfo& info, size_t index, const char* method, const char* name,
                  size_t count);

// A Float32Array argument of any length.
struct FloatSpan {
  float* data;
  size_t length;
};
FloatSpan FloatSpanArg(const Napi::CallbackInfo& info, size_t index, const char* method,
                       const char* name);

// The data of a Uint8Array argument that must hold exactly `count` bytes.
uint8_t* BytesArg(const Napi::CallbackInfo& info, size_t index, const char* method,
                  const char* name, size_t count);

// The data of an Int32Array argument that must hold exactly `count` elements.
int32_t* IntArrayArg(const Napi::CallbackInfo& info, size_t index, const char* method,
                     const char* name, size_t count);

// `count` positive integers (an Array), e.g. a shape.
std::vector<int> DimsArg(const Napi::CallbackInfo& info, size_t index, const char* method,
                         const char* name, size_t count, int min = 1);

// An activation's layout (see Backend's Layout in src/nn/backend.ts).
enum class Layout { kPlain, kBlocked };

// An optional layout argument: 'plain' (the default) or 'blocked'.
Layout LayoutArg(const Napi::CallbackInfo& info, size_t index, const char* method, const char* name);

double NumberArg(const Napi::CallbackInfo& info, size_t index, const char* method,
                 const char* name);

// A normalisation's eps: a number > 0.
double EpsArg(const Napi::CallbackInfo& info, size_t index, const char* method);

// A dropout mask's arguments at `index`: p, a number in [0, 1), then the draw's keys, an Array of
// integers (each taken modulo 2^32, as random.ts's hashKeys takes it), mixed into the draw's prefix.
struct DropoutDraw {
  double p;
  uint32_t prefix;
};
DropoutDraw DropoutArgs(const Napi::CallbackInfo& info, size_t index, const char* method);

// The error for an embedding's token id that is no integer in [0, vocab): sequence s, position t,
// at x[at].
Napi::Error BadTokenError(Napi::Env env, const char* method, size_t s, size_t t, size_t at, float value, size_t vocab);

// A convolution's shape (Backend's ConvShape) [N, C, H, W, K, R, S, stride, pad]: all positive but
// the padding, the kernel inside the padded input.
std::vector<int> ConvShapeArg(const Napi::CallbackInfo& info, size_t index, const char* method);

// A pooling's shape (Backend's PoolShape) [N, C, H, W, R, stride, pad]: likewise, the window inside.
std::vector<int> PoolShapeArg(const Napi::CallbackInfo& info, size_t index, const char* method);

// A pooling's kind, argument 0: 'max' (true) or 'avg' (false).
bool MaxPoolingArg(const Napi::CallbackInfo& info, const char* method);

}  // namespace ft::cpu
