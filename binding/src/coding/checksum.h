// CRC-64 of a typed array's bytes (ISA-L), for checkpoint stripes and dataset record batches.
#pragma once
#include <napi.h>

namespace ft {

// crc64(bytes, previous?) -> 16 hex digits; `previous` chains the CRC over consecutive pieces.
Napi::Value Crc64(const Napi::CallbackInfo& info);

}  // namespace ft
