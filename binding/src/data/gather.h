// Gathering a micro-batch: the given rows of a shard's stored features, as floats.
#pragma once
#include <napi.h>

namespace ft {

// gatherRows(features, sampleSize, rows, divisor, x): x[i, :] = features[rows[i], :] / divisor.
Napi::Value GatherRows(const Napi::CallbackInfo& info);

// adviseRandomRows(features) -> bool: features not yet written, to be gathered by random rows,
// backed by huge pages where the kernel allows. Whether the advice was taken.
Napi::Value AdviseRandomRows(const Napi::CallbackInfo& info);

}  // namespace ft
