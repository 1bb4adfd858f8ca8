// Failure -> typed JS error. ULFM's classes get their own types; any other MPI class keeps its
// number in `errorClass`.
#include "mpi/errors.h"

#include <mpi-ext.h>

namespace ft {

namespace {
struct ErrorTypes {
  Napi::FunctionReference mpi, procFailed, revoked, notSupported, timeout;
};
ErrorTypes& Types() {
  static ErrorTypes* types = new ErrorTypes();  // references live as long as the process
  return *types;
}

bool IsProcFailed(int errorClass) {
#ifdef MPIX_ERR_PROC_FAILED
  if (errorClass == MPIX_ERR_PROC_FAILED) return true;
#endif
#ifdef MPIX_ERR_PROC_FAILED_PENDING
  if (errorClass == MPIX_ERR_PROC_FAILED_PENDING) return true;
#endif
  return false;
}

bool IsRevoked(int errorClass) {
#ifdef MPIX_ERR_REVOKED
  return errorClass == MPIX_ERR_REVOKED;
#else
  (void)errorClass;
  return false;
#endif
}

Napi::FunctionReference TypeArg(Napi::Object types, const char* name) {
  Napi::Value value = types.Get(name);
  if (!value.IsFunction()) {
    throw Napi::TypeError::New(types.Env(), std::string("registerErrorTypes: expected ") + name +
                                                " to be a class");
  }
  return Napi::Persistent(value.As<Napi::Function>());
}
}  // namespace

Napi::Value RegisterErrorTypes(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!info[0].IsObject()) {
    throw Napi::TypeError::New(env, "registerErrorTypes: expected an object of error classes");
  }
  Napi::Object types = info[0].As<Napi::Object>();
  ErrorTypes& t = Types();
  t.mpi = TypeArg(types, "MpiError");
  t.procFailed = TypeArg(types, "ProcFailedError");
  t.revoked = TypeArg(types, "RevokedError");
  t.notSupported = TypeArg(types, "NotSupportedError");
  t.timeout = TypeArg(types, "CommTimeoutError");
  return env.Undefined();
}

Napi::Value MakeError(Napi::Env env, const Failure& failure) {
  ErrorTypes& t = Types();
  Napi::FunctionReference* type = nullptr;
  switch (failure.kind) {
    case FailureKind::kUsage:
      return Napi::Error::New(env, failure.message).Value();
    case FailureKind::kNotSupported:
      type = &t.notSupported;
      break;
    case FailureKind::kTimeout:
      type = &t.timeout;
      break;
    case FailureKind::kMpi:
      type = IsProcFailed(failure.errorClass) ? &t.procFailed
             : IsRevoked(failure.errorClass)  ? &t.revoked
                                              : &t.mpi;
      break;
  }
  Napi::Object error;
  if (type->IsEmpty()) {  // used without src/comm: still an Error with the class attached
    error = Napi::Error::New(env, failure.message).Value();
    error.Set("errorClass", failure.errorClass);
  } else {
    error = type->New({Napi::String::New(env, failure.message),
                       Napi::Number::New(env, failure.errorClass)});
  }
  return error;
}

}  // namespace ft
