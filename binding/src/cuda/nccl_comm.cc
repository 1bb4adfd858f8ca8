// NCCL communicators for the GPU backend. NCCL detects and agrees on nothing here: ULFM decides
// who failed, then each survivor aborts its NCCL communicator and makes a new one over the repaired
// MPI communicator (a unique id sent over it). Every communicator is non-blocking and every wait
// has a deadline: a peer that never comes ends in an abort and an error, never a hang.
#include <napi.h>

#include <chrono>
#include <cstring>
#include <string>
#include <thread>

#include "args.h"
#include "cpu/tensor_args.h"
#include "cuda_check.h"
#include "cuda_module.h"
#include "device_memory.h"

namespace ft::cuda {

namespace {
struct NcclComm {
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  bool live = false;

  void Abort() {
    if (!live) return;
    live = false;
    ncclCommAbort(comm);  // frees the communicator whatever state it is in
    cudaStreamDestroy(stream);
  }
};

using Clock = std::chrono::steady_clock;

NcclComm* CommArg(const Napi::CallbackInfo& info, const char* method) {
  if (!info[0].IsExternal()) ThrowArg(info.Env(), method, "comm", "an NCCL communicator (ncclInit)", info[0]);
  auto* comm = info[0].As<Napi::External<NcclComm>>().Data();
  if (!comm->live) throw Napi::Error::New(info.Env(), std::string(method) + ": the NCCL communicator was aborted");
  return comm;
}

// Waits until the communicator has no operation in progress (and, with `stream`, until the stream
// is done); past the deadline, or on an NCCL error, aborts it and throws.
void Await(Napi::Env env, NcclComm* comm, const char* method, double timeoutMs, bool stream) {
  const auto deadline = Clock::now() + std::chrono::duration<double, std::milli>(timeoutMs);
  for (;;) {
    ncclResult_t state = ncclSuccess;
    ncclCommGetAsyncError(comm->comm, &state);
    if (state != ncclSuccess && state != ncclInProgress) {
      comm->Abort();
      throw Napi::Error::New(env, std::string(method) + ": NCCL failed: " + ncclGetErrorString(state) +
                                      "; the communicator was aborted");
    }
    if (state == ncclSuccess) {
      if (!stream) return;
      cudaError_t done = cudaStreamQuery(comm->stream);
      if (done == cudaSuccess) return;
      if (done != cudaErrorNotReady) Check(done, method);
    }
    if (Clock::now() > deadline) {
      comm->Abort();
      throw Napi::Error::New(env, std::string(method) + ": timed out after " + std::to_string(static_cast<long long>(timeoutMs)) +
                                      " ms; the NCCL communicator was aborted");
    }
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

// ncclUniqueId() -> Uint8Array: made by one rank, sent to the others over MPI.
Napi::Value UniqueId(const Napi::CallbackInfo& info) {
  Device();
  ncclUniqueId id;
  FT_CUDA_CHECK(ncclGetUniqueId(&id));
  auto bytes = Napi::Uint8Array::New(info.Env(), sizeof id.internal);
  std::memcpy(bytes.Data(), id.internal, sizeof id.internal);
  return bytes;
}

// ncclInit(id, size, rank, timeoutMs) -> communicator, once all `size` ranks joined.
Napi::Value Init(const Napi::CallbackInfo& info) {
  const char* m = "ncclInit";
  ncclUniqueId id;
  std::memcpy(id.internal, cpu::BytesArg(info, 0, m, "id", sizeof id.internal), sizeof id.internal);
  int size = IntArg(info, 1, m, "size", 1, 1 << 20);
  int rank = IntArg(info, 2, m, "rank", 0, size - 1);
  double timeoutMs = cpu::NumberArg(info, 3, m, "timeoutMs");
  Device();
  auto* comm = new NcclComm();
  auto external = Napi::External<NcclComm>::New(info.Env(), comm, [](Napi::Env, NcclComm* c) {
    c->Abort();
    delete c;
  });
  // a blocking stream: NCCL's work waits for the kernels and copies queued before it on the default stream
  FT_CUDA_CHECK(cudaStreamCreateWithFlags(&comm->stream, cudaStreamDefault));
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclResult_t started = ncclCommInitRankConfig(&comm->comm, size, id, rank, &config);
  comm->live = true;
  if (started != ncclSuccess && started != ncclInProgress) {
    comm->Abort();
    Check(started, "ncclCommInitRankConfig");
  }
  Await(info.Env(), comm, m, timeoutMs, false);
  return external;
}

// ncclAllReduce(comm, array, timeoutMs): array's device mirror becomes the sum over the ranks.
Napi::Value AllReduce(const Napi::CallbackInfo& info) {
  const char* m = "ncclAllReduce";
  NcclComm* comm = CommArg(info, m);
  size_t n = cpu::FloatSpanArg(info, 1, m, "array").length;
  double timeoutMs = cpu::NumberArg(info, 2, m, "timeoutMs");
  float* data = MirrorOf<float>(info[1].As<Napi::TypedArray>());
  ncclResult_t started = ncclAllReduce(data, data, n, ncclFloat32, ncclSum, comm->comm, comm->stream);
  if (started != ncclSuccess && started != ncclInProgress) {
    comm->Abort();
    Check(started, "ncclAllReduce");
  }
  Await(info.Env(), comm, m, timeoutMs, true);
  return info.Env().Undefined();
}

// ncclAbort(comm): aborts it (and frees it); a second abort does nothing.
Napi::Value Abort(const Napi::CallbackInfo& info) {
  if (!info[0].IsExternal()) ThrowArg(info.Env(), "ncclAbort", "comm", "an NCCL communicator (ncclInit)", info[0]);
  info[0].As<Napi::External<NcclComm>>().Data()->Abort();
  return info.Env().Undefined();
}
}  // namespace

void AddNcclExports(Napi::Env env, Napi::Object exports) {
  exports.Set("ncclUniqueId", Napi::Function::New(env, UniqueId, "ncclUniqueId"));
  exports.Set("ncclInit", Napi::Function::New(env, Init, "ncclInit"));
  exports.Set("ncclAllReduce", Napi::Function::New(env, AllReduce, "ncclAllReduce"));
  exports.Set("ncclAbort", Napi::Function::New(env, Abort, "ncclAbort"));
}

}  // namespace ft::cuda
