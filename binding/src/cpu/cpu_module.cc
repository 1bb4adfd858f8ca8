// The `cpu` object of the addon: the kernels, the instruction-set level they run at
// (kernel_level.h) and the per-rank thread count (default 1: one rank per core).
#include <omp.h>
#include <pthread.h>
#include <sched.h>

#include <cstdlib>
#include <vector>

#include "args.h"
#include "cpu_kernels.h"
#include "kernel_level.h"
#include "signals_held.h"

namespace ft::cpu {

namespace {
// With n > 1 threads, pins OpenMP's thread t to its own core: core (k n + t) of the cores the
// caller may use, round robin, k being the rank's place on its host (Open MPI's local rank; 0
// alone), so that ranks sharing cores (--bind-to none) spread out. Left to the scheduler, both
// threads stayed on one core here and a second thread gained lenet nothing (pinned: 1.65x). One
// thread is not pinned: mpirun binds a rank to a core where there are enough.
void PinThreads(int n) {
  cpu_set_t allowed;
  if (n <= 1 || sched_getaffinity(0, sizeof allowed, &allowed) != 0) return;
  std::vector<int> cores;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &allowed)) cores.push_back(cpu);
  }
  if (cores.size() < 2) return;
  const char* localRank = std::getenv("OMPI_COMM_WORLD_LOCAL_RANK");
  const size_t first = static_cast<size_t>(localRank != nullptr ? std::atoi(localRank) : 0) * n;
#pragma omp parallel num_threads(n)
  {
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cores[(first + omp_get_thread_num()) % cores.size()], &one);
    pthread_setaffinity_np(pthread_self(), sizeof one, &one);
  }
}

// OpenBLAS (the linear layers) stays at one thread (kernel_level.cc loads it so): its workers spin
// a while after each call, on the cores OpenMP's threads need (lenet at 2 threads: 1.3x with them,
// 1.75x without).
void SetThreadCount(int n) {
  omp_set_num_threads(n);  // oneDNN's runtime and the element-wise kernels
  PinThreads(n);
}

Napi::Value SetThreads(const Napi::CallbackInfo& info) {
  SetThreadCount(IntArg(info, 0, "setThreads", "threads", 1, 1024));
  return info.Env().Undefined();
}
}  // namespace

Napi::Object Exports(Napi::Env env) {
  SetThreadCount(1);
  Napi::Object cpu = Napi::Object::New(env);
  // every kernel runs with the caller's asynchronous signals held (signals_held.h), setThreads too:
  // its PinThreads starts OpenMP's workers (at load, one thread starts none)
  auto hold = [&](const char* name, auto fn) {
    auto held = [fn](const Napi::CallbackInfo& info) {
      SignalsHeld held;
      return fn(info);
    };
    cpu.Set(name, Napi::Function::New(env, held, name));
  };
  // and at the pinned level: the host's highest if nothing pinned one before the first
  auto add = [&](const char* name, Napi::Function::Callback fn) {
    hold(name, [fn](const Napi::CallbackInfo& info) {
      KernelLevel();
      return fn(info);
    });
  };
  hold("setThreads", SetThreads);
  AddLevelExports(env, cpu);
  add("conv2dForward", Conv2dForward);
  add("conv2dBackwardData", Conv2dBackwardData);
  add("conv2dBackwardWeights", Conv2dBackwardWeights);
  add("pool2dWorkspaceBytes", Pool2dWorkspaceBytes);
  add("pool2dForward", Pool2dForward);
  add("pool2dBackward", Pool2dBackward);
  add("convertLayout", ConvertLayout);
  hold("setWinograd", SetWinograd);  // a setting, read when a convolution is made: it pins nothing
  cpu.DefineProperty(Napi::PropertyDescriptor::Accessor(env, cpu, "channelBlock", [](const Napi::CallbackInfo& info) {
    KernelLevel();
    return Napi::Value(Napi::Number::New(info.Env(), ChannelBlock()));
  }, napi_enumerable));
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
  add("dropoutMask", DropoutMask);
  add("multiply", Multiply);
  add("attentionForward", AttentionForward);
  add("attentionBackward", AttentionBackward);
  add("geluForward", GeluForward);
  add("geluBackward", GeluBackward);
  add("embeddingForward", EmbeddingForward);
  add("embeddingBackward", EmbeddingBackward);
  add("sumOfSquares", SumOfSquares);
  add("scaleInPlace", ScaleInPlace);
  return cpu;
}

}  // namespace ft::cpu
