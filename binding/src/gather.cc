// Gathering a micro-batch on the step's critical path: a shard's stored features (uint8 pixels or
// float32 values) at the given rows, divided by the dataset's divisor into a float batch. Each value
// is the double quotient rounded to float32, as JS's `x[j] = v / divisor` stores it: the same bits.
#include "gather.h"

#include <cstdint>
#include <string>

#include "args.h"

namespace ft {

Napi::Value GatherRows(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const char* m = "gatherRows";
  if (info.Length() < 5) ThrowArg(env, m, "arguments", "5 arguments", std::to_string(info.Length()));
  if (!info[0].IsTypedArray()) ThrowArg(env, m, "features", "a Uint8Array or Float32Array", info[0]);
  auto features = info[0].As<Napi::TypedArray>();
  const napi_typedarray_type kind = features.TypedArrayType();
  if (kind != napi_uint8_array && kind != napi_float32_array) ThrowArg(env, m, "features", "a Uint8Array or Float32Array", info[0]);
  const size_t size = IntArg(info, 1, m, "sampleSize", 1, INT32_MAX);
  if (!info[2].IsTypedArray() || info[2].As<Napi::TypedArray>().TypedArrayType() != napi_int32_array) {
    ThrowArg(env, m, "rows", "an Int32Array", info[2]);
  }
  auto rowArray = info[2].As<Napi::TypedArray>();
  const size_t rowCount = rowArray.ElementLength();
  const int32_t* rows = reinterpret_cast<const int32_t*>(DataOf(rowArray));
  if (!info[3].IsNumber()) ThrowArg(env, m, "divisor", "a positive number", info[3]);
  const double divisor = info[3].As<Napi::Number>().DoubleValue();
  if (!(divisor > 0)) ThrowArg(env, m, "divisor", "a positive number", info[3]);
  if (!info[4].IsTypedArray() || info[4].As<Napi::TypedArray>().TypedArrayType() != napi_float32_array) {
    ThrowArg(env, m, "x", "a Float32Array", info[4]);
  }
  auto xArray = info[4].As<Napi::TypedArray>();
  if (xArray.ElementLength() < rowCount * size) {
    ThrowArg(env, m, "x", "room for " + std::to_string(rowCount * size) + " floats", std::to_string(xArray.ElementLength()) + " floats");
  }
  float* x = reinterpret_cast<float*>(DataOf(xArray));
  const size_t stored = features.ElementLength() / size;
  for (size_t i = 0; i < rowCount; ++i) {
    if (rows[i] < 0 || static_cast<size_t>(rows[i]) >= stored) {
      ThrowArg(env, m, "rows", "rows in [0, " + std::to_string(stored) + ")", "row " + std::to_string(rows[i]));
    }
  }
  if (kind == napi_uint8_array) {
    // a uint8 has 256 values: their quotients, looked up, are the division's floats
    float quotients[256];
    for (int v = 0; v < 256; ++v) quotients[v] = static_cast<float>(v / divisor);
    const uint8_t* bytes = DataOf(features);
    for (size_t i = 0; i < rowCount; ++i) {
      const uint8_t* source = bytes + static_cast<size_t>(rows[i]) * size;
      float* out = x + i * size;
      for (size_t j = 0; j < size; ++j) out[j] = quotients[source[j]];
    }
  } else {
    const float* values = reinterpret_cast<const float*>(DataOf(features));
    for (size_t i = 0; i < rowCount; ++i) {
      const float* source = values + static_cast<size_t>(rows[i]) * size;
      float* out = x + i * size;
      for (size_t j = 0; j < size; ++j) out[j] = static_cast<float>(source[j] / divisor);
    }
  }
  return env.Undefined();
}

}  // namespace ft
