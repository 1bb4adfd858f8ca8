// The addon's `ec` object: Reed-Solomon encode/decode (erasure.h) over typed arrays' bytes.
#pragma once
#include <napi.h>

namespace ft {

// { encode(k, m, data, parity, rows?), decode(k, m, present, fragments, wanted, outputs) }
Napi::Object EcExports(Napi::Env env);

}  // namespace ft
