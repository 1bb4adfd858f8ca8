// The one place where failures cross into JS: typed errors that keep the MPI error class.
#pragma once
#include <napi.h>

#include "mpi/mpi_check.h"

namespace ft {

// registerErrorTypes({MpiError, ProcFailedError, RevokedError, NotSupportedError,
// CommTimeoutError}): the JS classes (src/comm/errors.ts) the addon constructs as
// `new Class(message, errorClass)`.
Napi::Value RegisterErrorTypes(const Napi::CallbackInfo& info);

Napi::Value MakeError(Napi::Env env, const Failure& failure);

}  // namespace ft
