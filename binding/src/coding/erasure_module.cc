// The addon's `ec` object: the raw bytes of any ArrayBufferViews (a Float32Array of state as well
// as a Uint8Array, at any byteOffset) coded synchronously on the calling thread by erasure.h. The
// JS values are checked here; counts, indices and overlaps by erasure.h, whose
// std::invalid_argument becomes a TypeError with the same message.
#include "coding/erasure_module.h"

#include <cmath>
#include <stdexcept>

#include "args.h"
#include "coding/erasure.h"

namespace ft {

namespace {
struct Bytes {
  uint8_t* data;
  size_t length;
};

// An Array of ArrayBufferViews, each `length` bytes long (the first view met sets it when unset).
std::vector<Bytes> ViewsArg(const Napi::CallbackInfo& info, size_t index, const char* method,
                            const char* name, std::string& lengthOf, size_t& length) {
  Napi::Value value = info[index];
  if (!value.IsArray()) ThrowArg(info.Env(), method, name, "an Array of ArrayBufferViews", value);
  auto list = value.As<Napi::Array>();
  std::vector<Bytes> views;
  for (uint32_t i = 0; i < list.Length(); ++i) {
    Napi::Value element = list.Get(i);
    std::string elementName = std::string(name) + "[" + std::to_string(i) + "]";
    Bytes bytes;
    if (element.IsTypedArray()) {
      auto array = element.As<Napi::TypedArray>();
      bytes = {DataOf(array), array.ByteLength()};
    } else if (element.IsDataView()) {
      auto view = element.As<Napi::DataView>();
      bytes = {static_cast<uint8_t*>(view.ArrayBuffer().Data()) + view.ByteOffset(), view.ByteLength()};
    } else {
      ThrowArg(info.Env(), method, elementName.c_str(), "an ArrayBufferView", element);
    }
    if (lengthOf.empty()) {
      lengthOf = elementName;
      length = bytes.length;
    } else if (bytes.length != length) {
      ThrowArg(info.Env(), method, elementName.c_str(),
               std::to_string(length) + " bytes long like " + lengthOf,
               std::to_string(bytes.length) + " bytes");
    }
    views.push_back(bytes);
  }
  return views;
}

// An Array of fragment or row numbers; erasure.h checks their range against k and m.
std::vector<int> IndicesArg(const Napi::CallbackInfo& info, size_t index, const char* method,
                            const char* name) {
  Napi::Value value = info[index];
  const std::string expected = "an Array of integers from 0 to " + std::to_string(kMaxEcFragments - 1);
  if (!value.IsArray()) ThrowArg(info.Env(), method, name, expected, value);
  auto list = value.As<Napi::Array>();
  std::vector<int> indices;
  for (uint32_t i = 0; i < list.Length(); ++i) {
    Napi::Value element = list.Get(i);
    double number = element.IsNumber() ? element.As<Napi::Number>().DoubleValue() : -1;
    if (std::trunc(number) != number || number < 0 || number >= kMaxEcFragments) {
      ThrowArg(info.Env(), method, name, expected, element);
    }
    indices.push_back(static_cast<int>(number));
  }
  return indices;
}

std::vector<const uint8_t*> Inputs(const std::vector<Bytes>& views) {
  std::vector<const uint8_t*> pointers;
  for (const Bytes& view : views) pointers.push_back(view.data);
  return pointers;
}

std::vector<uint8_t*> Outputs(const std::vector<Bytes>& views) {
  std::vector<uint8_t*> pointers;
  for (const Bytes& view : views) pointers.push_back(view.data);
  return pointers;
}

// ec.encode(k, m, data, parity, rows = [0 .. m-1])
Napi::Value Encode(const Napi::CallbackInfo& info) {
  const char* method = "ec.encode";
  int k = IntArg(info, 0, method, "k", 1, kMaxEcFragments - 1);
  int m = IntArg(info, 1, method, "m", 1, kMaxEcFragments - k);
  std::string lengthOf;
  size_t length = 0;
  std::vector<Bytes> data = ViewsArg(info, 2, method, "data", lengthOf, length);
  std::vector<Bytes> parity = ViewsArg(info, 3, method, "parity", lengthOf, length);
  std::vector<int> rows;
  if (info[4].IsUndefined()) {
    for (int row = 0; row < m; ++row) rows.push_back(row);
  } else {
    rows = IndicesArg(info, 4, method, "rows");
  }
  try {
    EcEncode(k, m, rows, length, Inputs(data), Outputs(parity));
  } catch (const std::invalid_argument& error) {
    throw Napi::TypeError::New(info.Env(), error.what());
  }
  return info.Env().Undefined();
}

// ec.decode(k, m, present, fragments, wanted, outputs)
Napi::Value Decode(const Napi::CallbackInfo& info) {
  const char* method = "ec.decode";
  int k = IntArg(info, 0, method, "k", 1, kMaxEcFragments - 1);
  int m = IntArg(info, 1, method, "m", 1, kMaxEcFragments - k);
  std::vector<int> present = IndicesArg(info, 2, method, "present");
  std::string lengthOf;
  size_t length = 0;
  std::vector<Bytes> fragments = ViewsArg(info, 3, method, "fragments", lengthOf, length);
  std::vector<int> wanted = IndicesArg(info, 4, method, "wanted");
  std::vector<Bytes> outputs = ViewsArg(info, 5, method, "outputs", lengthOf, length);
  try {
    EcDecode(k, m, present, length, Inputs(fragments), wanted, Outputs(outputs));
  } catch (const std::invalid_argument& error) {
    throw Napi::TypeError::New(info.Env(), error.what());
  }
  return info.Env().Undefined();
}
}  // namespace

Napi::Object EcExports(Napi::Env env) {
  Napi::Object ec = Napi::Object::New(env);
  ec.Set("encode", Napi::Function::New(env, Encode, "encode"));
  ec.Set("decode", Napi::Function::New(env, Decode, "decode"));
  return ec;
}

}  // namespace ft
