// The `cpu` object of the addon: the kernels and the per-rank thread count (default 1: one rank
// per core).
#include <cblas.h>
#include <omp.h>

#include "../args.h"
#include "cpu_kernels.h"

namespace ft::cpu {

namespace {
void SetThreadCount(int n) {
  omp_set_num_threads(n);  // oneDNN's runtime
  openblas_set_num_threads(n);
}

Napi::Value SetThreads(const Napi::CallbackInfo& info) {
  SetThreadCount(IntArg(info, 0, "setThreads", "threads", 1, 1024));
  return info.Env().Undefined();
}
}  // namespace

Napi::Object Exports(Napi::Env env) {
  SetThreadCount(1);
  Napi::Object cpu = Napi::Object::New(env);
  auto add = [&](const char* name, Napi::Function::Callback fn) {
    cpu.Set(name, Napi::Function::New(env, fn, name));
  };
  add("setThreads", SetThreads);
  add("conv2dForward", Conv2dForward);
  add("conv2dBackwardData", Conv2dBackwardData);
  add("conv2dBackwardWeights", Conv2dBackwardWeights);
  add("pool2dWorkspaceBytes", Pool2dWorkspaceBytes);
  add("pool2dForward", Pool2dForward);
  add("pool2dBackward", Pool2dBackward);
  add("convertLayout", ConvertLayout);
  cpu.Set("channelBlock", ChannelBlock());
  add("linearForward", LinearForward);
  add("linearBackward", LinearBackward);
  add("batchnormForwardTrain", BatchnormForwardTrain);
  add("batchnormForwardEval", BatchnormForwardEval);
  add("batchnormBackward", BatchnormBackward);
  add("layernormForward", LayernormForward);
  add("layernormBackward", LayernormBackward);
  add("globalAvgPoolForward", GlobalAvgPoolForward);
  add("globalAvgPoolBackward", GlobalAvgPoolBackward);
  add("reluForward", ReluForward);
  add("reluBackward", ReluBackward);
  add("addInPlace", AddInPlace);
  add("softmaxCrossEntropy", SoftmaxCrossEntropy);
  add("sgdUpdate", SgdUpdate);
  add("sgdStateInput", SgdStateInput);
  add("sgdReplay", SgdReplay);
  add("adamwUpdate", AdamwUpdate);
  add("adamwReplay", AdamwReplay);
  return cpu;
}

}  // namespace ft::cpu
