// Gathering a micro-batch on the step's critical path: a shard's stored features (uint8 pixels or
// float32 values) at the given rows, divided by the dataset's divisor into a float batch. Each value
// is the double quotient rounded to float32, as JS's `x[j] = v / divisor` stores it: the same bits.
// The rows come from anywhere in the shard, out of the caches: their lines are prefetched a few
// rows ahead, and a shard's memory can be put on huge pages (64 Fashion-MNIST rows after the step's
// work: 60 us; prefetched 43; on huge pages too 35).
#include "data/gather.h"

#include <cstdint>
#include <string>

#include "args.h"
#include "data/pages.h"

namespace ft {

namespace {
// Rows asked for this many rows before they are converted: a row of Fashion-MNIST is 13 cache
// lines from anywhere in the shard, and its misses then overlap the work on the rows before it
constexpr size_t kRowsAhead = 2;

// Row `row` of `rowBytes` bytes each, from `base`.
void PrefetchRow(const uint8_t* base, int32_t row, size_t rowBytes) {
  const uint8_t* start = base + static_cast<size_t>(row) * rowBytes;
  for (size_t at = 0; at < rowBytes; at += 64) __builtin_prefetch(start + at);
}
}  // namespace

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
  // rows are checked once, below, then read while x is written
  const uint8_t* rowBytesFrom = DataOf(rowArray);
  const uint8_t* xFrom = DataOf(xArray);
  if (rowBytesFrom < xFrom + xArray.ByteLength() && xFrom < rowBytesFrom + rowArray.ByteLength()) {
    ThrowArg(env, m, "x", "memory apart from rows", "a view overlapping rows");
  }
  const size_t stored = features.ElementLength() / size;
  for (size_t i = 0; i < rowCount; ++i) {
    if (rows[i] < 0 || static_cast<size_t>(rows[i]) >= stored) {
      ThrowArg(env, m, "rows", "rows in [0, " + std::to_string(stored) + ")", "row " + std::to_string(rows[i]));
    }
  }
  const uint8_t* base = DataOf(features);
  const size_t rowBytes = size * (kind == napi_uint8_array ? 1 : sizeof(float));
  for (size_t i = 0; i < kRowsAhead && i < rowCount; ++i) PrefetchRow(base, rows[i], rowBytes);
  if (kind == napi_uint8_array) {
    // a uint8 has 256 values: their quotients, looked up, are the division's floats
    float quotients[256];
    for (int v = 0; v < 256; ++v) quotients[v] = static_cast<float>(v / divisor);
    for (size_t i = 0; i < rowCount; ++i) {
      if (i + kRowsAhead < rowCount) PrefetchRow(base, rows[i + kRowsAhead], rowBytes);
      const uint8_t* source = base + static_cast<size_t>(rows[i]) * size;
      float* out = x + i * size;
      for (size_t j = 0; j < size; ++j) out[j] = quotients[source[j]];
    }
  } else {
    const float* values = reinterpret_cast<const float*>(base);
    for (size_t i = 0; i < rowCount; ++i) {
      if (i + kRowsAhead < rowCount) PrefetchRow(base, rows[i + kRowsAhead], rowBytes);
      const float* source = values + static_cast<size_t>(rows[i]) * size;
      float* out = x + i * size;
      for (size_t j = 0; j < size; ++j) out[j] = static_cast<float>(source[j] / divisor);
    }
  }
  return env.Undefined();
}

// A shard's rows are gathered in random order from far more memory than the TLB maps in 4 KiB
// pages: a page walk per row, whose page-table lines the step's own work keeps evicting. Huge
// pages map a shard in a few dozen entries; asked before the memory is first written, the kernel
// faults it in 2 MiB at a time. Best effort: where transparent huge pages are off, nothing changes.
Napi::Value AdviseRandomRows(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!info[0].IsTypedArray()) ThrowArg(env, "adviseRandomRows", "features", "a typed array", info[0]);
  auto features = info[0].As<Napi::TypedArray>();
  return Napi::Boolean::New(env, AdviseHugePages(reinterpret_cast<uintptr_t>(DataOf(features)), features.ByteLength()));
}

}  // namespace ft
