// The optimizers' arguments, read alike by the CPU kernels (elementwise.cc) and the GPU's
// (cuda/cuda_module.cc): the optional outputs of an out-of-place update, and AdamW's scalars worked
// out in double and rounded to float once, as PyTorch does, so that both devices compute each
// element from the same floats by the same float operations (the same bits).
#pragma once
#include <napi.h>

#include "optimizer_math.h"

namespace ft::cpu {

// Whether a kernel's `count` optional output arrays, from argument `index` on, are given: all or none.
bool OutputsGiven(const Napi::CallbackInfo& info, size_t index, size_t count, const char* method);

// A beta in [0, 1).
double BetaArg(const Napi::CallbackInfo& info, size_t index, const char* method, const char* name);

// SGD's scalars, arguments `from` on: lr, momentum, weightDecay.
SgdScalars SgdArgs(const Napi::CallbackInfo& info, size_t from, const char* method);

// AdamW's moments, arguments `from` on: beta1, beta2.
AdamMoments AdamMomentsArgs(const Napi::CallbackInfo& info, size_t from, const char* method);

// AdamW's whole update, arguments `from` on: lr, beta1, beta2, eps, weightDecay, step (an integer >= 1).
AdamwScalars AdamwArgs(const Napi::CallbackInfo& info, size_t from, const char* method);

}  // namespace ft::cpu
