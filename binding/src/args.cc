// Argument checks for the communicator's methods.
#include "args.h"

#include <algorithm>
#include <climits>
#include <cmath>

namespace ft {

namespace {
std::string Describe(Napi::Value value) {
  if (value.IsUndefined()) return "undefined";
  if (value.IsNull()) return "null";
  if (value.IsArray()) return "Array";
  if (value.IsObject()) {
    Napi::Value ctor = value.As<Napi::Object>().Get("constructor");
    if (ctor.IsFunction()) {
      std::string name = ctor.As<Napi::Function>().Get("name").ToString();
      if (!name.empty()) return name;
    }
    return "object";
  }
  if (value.IsNumber()) return "number " + value.ToString().Utf8Value();
  if (value.IsString()) return "string";
  if (value.IsBoolean()) return "boolean";
  return "a " + std::string(value.IsSymbol() ? "symbol" : "bigint");
}

bool IsInt(Napi::Value value, double min, double max) {
  if (!value.IsNumber()) return false;
  double d = value.As<Napi::Number>().DoubleValue();
  return std::trunc(d) == d && d >= min && d <= max;
}
}  // namespace

void ThrowArg(Napi::Env env, const char* method, const char* name, const std::string& expected,
              const std::string& got) {
  throw Napi::TypeError::New(env, std::string(method) + ": expected " + name + " to be " +
                                      expected + ", got " + got);
}

void ThrowArg(Napi::Env env, const char* method, const char* name, const std::string& expected,
              Napi::Value got) {
  ThrowArg(env, method, name, expected, Describe(got));
}

Buffer BufferArg(const Napi::CallbackInfo& info, size_t index, const char* method,
                 const char* name) {
  Napi::Value value = info[index];
  const char* expected = "a Float32Array, Float64Array, Int32Array or Uint8Array";
  if (!value.IsTypedArray()) ThrowArg(info.Env(), method, name, expected, value);
  auto array = value.As<Napi::TypedArray>();
  MPI_Datatype type;
  switch (array.TypedArrayType()) {
    case napi_float32_array: type = MPI_FLOAT; break;
    case napi_float64_array: type = MPI_DOUBLE; break;
    case napi_int32_array: type = MPI_INT32_T; break;
    case napi_uint8_array: type = MPI_UINT8_T; break;
    default: ThrowArg(info.Env(), method, name, expected, value);
  }
  if (array.ElementLength() > static_cast<size_t>(INT_MAX)) {
    ThrowArg(info.Env(), method, name, "at most 2^31-1 elements long",
             std::to_string(array.ElementLength()) + " elements");
  }
  return Buffer{value, DataOf(array), static_cast<int>(array.ElementLength()), type, array.TypedArrayType()};
}

int IntArg(const Napi::CallbackInfo& info, size_t index, const char* method, const char* name,
           int min, int max) {
  Napi::Value value = info[index];
  if (!IsInt(value, min, max)) {
    ThrowArg(info.Env(), method, name,
             "an integer from " + std::to_string(min) + " to " + std::to_string(max), value);
  }
  return value.As<Napi::Number>().Int32Value();
}

std::vector<std::string> StringsArg(const Napi::CallbackInfo& info, size_t index, const char* method,
                                    const char* name) {
  Napi::Env env = info.Env();
  if (!info[index].IsArray()) ThrowArg(env, method, name, "an Array of strings", info[index]);
  Napi::Array list = info[index].As<Napi::Array>();
  std::vector<std::string> strings;
  for (uint32_t i = 0; i < list.Length(); ++i) {
    Napi::Value item = list.Get(i);
    if (!item.IsString()) ThrowArg(env, method, name, "an Array of strings", item);
    strings.push_back(item.As<Napi::String>());
  }
  return strings;
}

std::vector<int> CountsArg(const Napi::CallbackInfo& info, size_t index, const char* method,
                           const char* name, int length) {
  Napi::Value value = info[index];
  std::string expected = "an Array or Int32Array of " + std::to_string(length) +
                         " non-negative integers (one per rank)";
  if (!value.IsArray() && !(value.IsTypedArray() && value.As<Napi::TypedArray>().TypedArrayType() ==
                                                        napi_int32_array)) {
    ThrowArg(info.Env(), method, name, expected, value);
  }
  Napi::Object list = value.As<Napi::Object>();
  int64_t actual = list.Get("length").As<Napi::Number>().Int64Value();
  if (actual != length) {
    ThrowArg(info.Env(), method, name, expected, Describe(value) + " of " + std::to_string(actual));
  }
  std::vector<int> counts(length);
  for (int i = 0; i < length; ++i) {
    Napi::Value element = list.Get(static_cast<uint32_t>(i));
    if (!IsInt(element, 0, INT_MAX)) ThrowArg(info.Env(), method, name, expected, element);
    counts[i] = element.As<Napi::Number>().Int32Value();
  }
  return counts;
}

MPI_Op ReduceOpArg(const Napi::CallbackInfo& info, size_t index, const char* method) {
  Napi::Value value = info[index];
  if (value.IsUndefined()) return MPI_SUM;
  if (value.IsString()) {
    std::string op = value.As<Napi::String>();
    if (op == "sum") return MPI_SUM;
    if (op == "max") return MPI_MAX;
    if (op == "min") return MPI_MIN;
  }
  ThrowArg(info.Env(), method, "op", "'sum', 'max' or 'min'", value);
}

std::vector<int> Displacements(Napi::Env env, const std::vector<int>& counts, int total,
                               const char* method, const char* countsName,
                               const char* bufferName) {
  std::vector<int> displs(counts.size());
  long long sum = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    displs[i] = static_cast<int>(sum);
    sum += counts[i];
    if (sum > INT_MAX) break;
  }
  if (sum != total) {
    throw Napi::RangeError::New(env, std::string(method) + ": " + countsName + " add up to " +
                                         std::to_string(sum) + " elements but " + bufferName +
                                         " has " + std::to_string(total));
  }
  return displs;
}

void CheckDisplacements(Napi::Env env, const std::vector<int>& counts, const std::vector<int>& displs,
                        int total, bool disjoint, const char* method, const char* displsName,
                        const char* bufferName) {
  std::vector<std::pair<long long, long long>> blocks;
  for (size_t i = 0; i < counts.size(); ++i) {
    long long end = static_cast<long long>(displs[i]) + counts[i];
    if (end > total) {
      throw Napi::RangeError::New(env, std::string(method) + ": " + displsName + "[" + std::to_string(i) + "] + its count is " +
                                           std::to_string(end) + " elements but " + bufferName + " has " +
                                           std::to_string(total));
    }
    if (counts[i] > 0) blocks.emplace_back(displs[i], end);
  }
  if (!disjoint) return;
  std::sort(blocks.begin(), blocks.end());
  for (size_t i = 1; i < blocks.size(); ++i) {
    if (blocks[i].first < blocks[i - 1].second) {
      throw Napi::RangeError::New(env, std::string(method) + ": the blocks " + displsName + " places in " + bufferName +
                                           " overlap");
    }
  }
}

}  // namespace ft
