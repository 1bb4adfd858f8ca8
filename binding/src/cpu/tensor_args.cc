// Argument checks for the CPU kernels.
#include "tensor_args.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <string>

#include "args.h"
#include "counter_draw.h"

namespace ft::cpu {

namespace {
constexpr size_t kAnyLength = SIZE_MAX;

// A typed array of `kind` with exactly `count` elements (any number for kAnyLength).
Napi::TypedArray TypedArg(const Napi::CallbackInfo& info, size_t index, const char* method,
                          const char* name, size_t count, napi_typedarray_type kind,
                          const char* kindName) {
  Napi::Value value = info[index];
  std::string expected = std::string("a ") + kindName;
  if (count != kAnyLength) expected += " of " + std::to_string(count) + " elements";
  if (!value.IsTypedArray() || value.As<Napi::TypedArray>().TypedArrayType() != kind) {
    ThrowArg(info.Env(), method, name, expected, value);
  }
  auto array = value.As<Napi::TypedArray>();
  if (count != kAnyLength && array.ElementLength() != count) {
    ThrowArg(info.Env(), method, name, expected,
             std::string(kindName) + " of " + std::to_string(array.ElementLength()));
  }
  return array;
}
}  // namespace

float* FloatArg(const Napi::CallbackInfo& info, size_t index, const char* method, const char* name,
                size_t count) {
  return reinterpret_cast<float*>(
      DataOf(TypedArg(info, index, method, name, count, napi_float32_array, "Float32Array")));
}

double* DoubleArg(const Napi::CallbackInfo& info, size_t index, const char* method, const char* name,
                  size_t count) {
  return reinterpret_cast<double*>(
      DataOf(TypedArg(info, index, method, name, count, napi_float64_array, "Float64Array")));
}

FloatSpan FloatSpanArg(const Napi::CallbackInfo& info, size_t index, const char* method,
                       const char* name) {
  auto array = TypedArg(info, index, method, name, kAnyLength, napi_float32_array, "Float32Array");
  return FloatSpan{reinterpret_cast<float*>(DataOf(array)), array.ElementLength()};
}

uint8_t* BytesArg(const Napi::CallbackInfo& info, size_t index, const char* method,
                  const char* name, size_t count) {
  return DataOf(TypedArg(info, index, method, name, count, napi_uint8_array, "Uint8Array"));
}

int32_t* IntArrayArg(const Napi::CallbackInfo& info, size_t index, const char* method,
                     const char* name, size_t count) {
  return reinterpret_cast<int32_t*>(
      DataOf(TypedArg(info, index, method, name, count, napi_int32_array, "Int32Array")));
}

std::vector<int> DimsArg(const Napi::CallbackInfo& info, size_t index, const char* method,
                         const char* name, size_t count, int min) {
  Napi::Value value = info[index];
  std::string expected = "an Array of " + std::to_string(count) + " integers >= " + std::to_string(min);
  if (!value.IsArray() || value.As<Napi::Array>().Length() != count) {
    ThrowArg(info.Env(), method, name, expected, value);
  }
  auto array = value.As<Napi::Array>();
  std::vector<int> dims(count);
  for (uint32_t i = 0; i < count; ++i) {
    Napi::Value element = array.Get(i);
    double d = element.IsNumber() ? element.As<Napi::Number>().DoubleValue() : NAN;
    if (!(std::trunc(d) == d && d >= min && d <= INT_MAX)) {
      ThrowArg(info.Env(), method, name, expected, element);
    }
    dims[i] = static_cast<int>(d);
  }
  return dims;
}

double NumberArg(const Napi::CallbackInfo& info, size_t index, const char* method,
                 const char* name) {
  Napi::Value value = info[index];
  if (!value.IsNumber() || !std::isfinite(value.As<Napi::Number>().DoubleValue())) {
    ThrowArg(info.Env(), method, name, "a finite number", value);
  }
  return value.As<Napi::Number>().DoubleValue();
}

DropoutDraw DropoutArgs(const Napi::CallbackInfo& info, size_t index, const char* method) {
  double p = NumberArg(info, index, method, "p");
  if (!(p >= 0.0 && p < 1.0)) ThrowArg(info.Env(), method, "p", "a number in [0, 1)", info[index]);
  Napi::Value keys = info[index + 1];
  const char* expected = "an Array of integers >= 0";
  if (!keys.IsArray()) ThrowArg(info.Env(), method, "keys", expected, keys);
  Napi::Array array = keys.As<Napi::Array>();
  uint32_t prefix = kDrawStart;
  for (uint32_t i = 0; i < array.Length(); ++i) {
    Napi::Value key = array.Get(i);
    double value = key.IsNumber() ? key.As<Napi::Number>().DoubleValue() : -1.0;
    if (!(value >= 0.0 && value <= 9007199254740991.0 && std::trunc(value) == value)) {
      ThrowArg(info.Env(), method, "keys", expected, keys);
    }
    prefix = MixKey(prefix, static_cast<uint32_t>(std::fmod(value, 4294967296.0)));
  }
  return {p, prefix};
}

Napi::Error BadTokenError(Napi::Env env, const char* method, size_t s, size_t t, size_t at, float value, size_t vocab) {
  return Napi::RangeError::New(env, std::string(method) + ": the token of sequence " + std::to_string(s) + " at position " +
                                        std::to_string(t) + " (x[" + std::to_string(at) + "]) is " +
                                        Napi::Number::New(env, value).ToString().Utf8Value() + ", not an integer in [0, " +
                                        std::to_string(vocab) + ")");
}

std::vector<int> ConvShapeArg(const Napi::CallbackInfo& info, size_t index, const char* method) {
  std::vector<int> d = DimsArg(info, index, method, "shape", 9, 0);
  bool positive = std::all_of(d.begin(), d.begin() + 8, [](int v) { return v >= 1; });
  if (!positive || d[2] + 2 * d[8] < d[5] || d[3] + 2 * d[8] < d[6]) {
    ThrowArg(info.Env(), method, "shape", "[N, C, H, W, K, R, S, stride, pad] with the kernel inside the padded input",
             info[index]);
  }
  return d;
}

std::vector<int> PoolShapeArg(const Napi::CallbackInfo& info, size_t index, const char* method) {
  std::vector<int> d = DimsArg(info, index, method, "shape", 7, 0);
  if (d[0] < 1 || d[1] < 1 || d[4] < 1 || d[5] < 1 || d[2] + 2 * d[6] < d[4] || d[3] + 2 * d[6] < d[4]) {
    ThrowArg(info.Env(), method, "shape", "[N, C, H, W, R, stride, pad] with the window inside the padded input",
             info[index]);
  }
  return d;
}

bool MaxPoolingArg(const Napi::CallbackInfo& info, const char* method) {
  Napi::Value value = info[0];
  if (value.IsString()) {
    std::string kind = value.As<Napi::String>();
    if (kind == "max") return true;
    if (kind == "avg") return false;
  }
  ThrowArg(info.Env(), method, "kind", "'max' or 'avg'", value);
}

Layout LayoutArg(const Napi::CallbackInfo& info, size_t index, const char* method, const char* name) {
  Napi::Value value = info[index];
  if (value.IsUndefined()) return Layout::kPlain;
  if (value.IsString()) {
    std::string layout = value.As<Napi::String>();
    if (layout == "plain") return Layout::kPlain;
    if (layout == "blocked") return Layout::kBlocked;
  }
  ThrowArg(info.Env(), method, name, "'plain' or 'blocked'", value);
}

double EpsArg(const Napi::CallbackInfo& info, size_t index, const char* method) {
  double eps = NumberArg(info, index, method, "eps");
  if (!(eps > 0.0)) ThrowArg(info.Env(), method, "eps", "a number > 0", info[index]);
  return eps;
}

}  // namespace ft::cpu
