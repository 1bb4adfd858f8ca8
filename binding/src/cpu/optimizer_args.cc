// The optimizers' arguments; see optimizer_args.h.
#include "optimizer_args.h"

#include <cmath>
#include <string>

#include "tensor_args.h"

namespace ft::cpu {

bool OutputsGiven(const Napi::CallbackInfo& info, size_t index, size_t count, const char* method) {
  size_t given = 0;
  for (size_t i = index; i < index + count; ++i) given += i < info.Length() && !info[i].IsUndefined() ? 1 : 0;
  if (given != 0 && given != count) {
    throw Napi::TypeError::New(info.Env(), std::string(method) + ": expected all " + std::to_string(count) +
                                               " output arrays or none, got " + std::to_string(given));
  }
  return given == count;
}

double BetaArg(const Napi::CallbackInfo& info, size_t index, const char* method, const char* name) {
  double beta = NumberArg(info, index, method, name);
  if (!(beta >= 0.0 && beta < 1.0)) {
    throw Napi::RangeError::New(info.Env(), std::string(method) + ": expected " + name + " in [0, 1), got " + std::to_string(beta));
  }
  return beta;
}

SgdScalars SgdArgs(const Napi::CallbackInfo& info, size_t from, const char* method) {
  return SgdScalars{static_cast<float>(NumberArg(info, from, method, "lr")),
                    static_cast<float>(NumberArg(info, from + 1, method, "momentum")),
                    static_cast<float>(NumberArg(info, from + 2, method, "weightDecay"))};
}

namespace {
AdamMoments Moments(double beta1, double beta2) {
  return AdamMoments{static_cast<float>(beta1), static_cast<float>(1.0 - beta1), static_cast<float>(beta2),
                     static_cast<float>(1.0 - beta2)};
}
}  // namespace

AdamMoments AdamMomentsArgs(const Napi::CallbackInfo& info, size_t from, const char* method) {
  return Moments(BetaArg(info, from, method, "beta1"), BetaArg(info, from + 1, method, "beta2"));
}

AdamwScalars AdamwArgs(const Napi::CallbackInfo& info, size_t from, const char* method) {
  double lr = NumberArg(info, from, method, "lr");
  double beta1 = BetaArg(info, from + 1, method, "beta1");
  double beta2 = BetaArg(info, from + 2, method, "beta2");
  float eps = static_cast<float>(NumberArg(info, from + 3, method, "eps"));
  double decay = NumberArg(info, from + 4, method, "weightDecay");
  double step = NumberArg(info, from + 5, method, "step");
  if (!(step >= 1.0 && step == std::floor(step))) {
    throw Napi::RangeError::New(info.Env(), std::string(method) + ": expected step to be an integer >= 1, got " + std::to_string(step));
  }
  return AdamwScalars{Moments(beta1, beta2), eps, static_cast<float>(1.0 - lr * decay),
                      static_cast<float>(-(lr / (1.0 - std::pow(beta1, step)))),
                      static_cast<float>(std::sqrt(1.0 - std::pow(beta2, step)))};
}

}  // namespace ft::cpu
