// Checksums of checkpoint stripes and dataset record batches: ISA-L's CRC-64 (ECMA-182, reflected),
// many GB/s, so verifying what is read or written costs a fraction of the I/O itself. Chained: the
// CRC of a after b equals crc64(b, crc64(a)). Exposed as addon.crc64(bytes, previous?) -> 16 hex.
#include "coding/checksum.h"

#include <isa-l/crc64.h>

#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace ft {

Napi::Value Crc64(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 1 || !info[0].IsTypedArray()) {
    throw Napi::TypeError::New(env, "crc64: expected bytes to be a typed array");
  }
  auto view = info[0].As<Napi::TypedArray>();
  const uint8_t* data = static_cast<const uint8_t*>(view.ArrayBuffer().Data()) + view.ByteOffset();
  uint64_t previous = 0;
  if (info.Length() > 1 && !info[1].IsUndefined()) {
    std::string hex = info[1].IsString() ? info[1].As<Napi::String>().Utf8Value() : "";
    char* end = nullptr;
    previous = std::strtoull(hex.c_str(), &end, 16);
    if (hex.size() != 16 || *end != '\0') {
      throw Napi::TypeError::New(env, "crc64: expected previous to be 16 hex digits, got \"" + hex + "\"");
    }
  }
  uint64_t crc = crc64_ecma_refl(previous, data, view.ByteLength());
  char out[17];
  std::snprintf(out, sizeof out, "%016" PRIx64, crc);
  return Napi::String::New(env, out);
}

}  // namespace ft
