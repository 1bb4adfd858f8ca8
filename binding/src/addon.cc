// The addon's entry: init()/finalize() of MPI on the comm thread, the Communicator class, the
// deadline of every wait, the registration of the JS error types, the progress watchdog, the
// CPU kernels (and the GPU backend's, where it was built), CRC-64, erasure coding and the checkpoint file writer.
#include <napi.h>

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "coding/checksum.h"
#ifdef FT_HAVE_CUDA
#include "cuda/cuda_module.h"
#endif
#include "mpi/comm_thread.h"
#include "cpu/cpu_kernels.h"
#include "mpi/communicator.h"
#include "io/direct_write.h"
#include "coding/erasure_module.h"
#include "mpi/errors.h"
#include "mpi/reserves.h"
#include "data/gather.h"
#include "data/pages.h"
#include "args.h"
#include "mpi/watchdog.h"

namespace ft {

namespace {
#if defined(FT_HAVE_MPIX_COMM_REVOKE) && defined(FT_HAVE_MPIX_COMM_SHRINK) && defined(FT_HAVE_MPIX_COMM_IAGREE)
constexpr bool kUlfm = true;
#else
constexpr bool kUlfm = false;
#endif

// Under `mpirun --with-ft ulfm` (which sets OMPI_MCA_mpi_ft_enable), Open MPI 5.0's MPI_Finalize
// ends with a PMIx fence over every process of the job, which now and then waits forever on one
// that was killed (seen here in about 1 run in 8; open-mpi/ompi#11404). Its fault-tolerant
// finalize already shrinks and barriers the survivors first, so skip the fence unless the user
// set the parameter. Called on the main thread, before the comm thread starts MPI: setenv is not
// thread-safe.
void SkipFinalizeFenceUnderUlfm() {
  const char* ft = std::getenv("OMPI_MCA_mpi_ft_enable");
  if (ft != nullptr && (std::string(ft) == "1" || std::string(ft) == "true")) {
    setenv("OMPI_MCA_async_mpi_finalize", "1", /*overwrite=*/0);
  }
}

struct Started {
  CommInfo world;
  bool joined;
  int threadLevel;
  std::string library;
  bool reserve = false;
};

// init(reserves): starts the comm thread, which initialises MPI (it alone calls MPI, so FUNNELED is
// enough) and resolves with the world communicator: a dup of COMM_WORLD with MPI_ERRORS_RETURN
// (with reserves > 0, a split of it without the launch's last `reserves` processes; on one of
// those, `world` null and `reserve` true: see awaitWake()), or, in a process that ranks of a running job spawned (spawn(), which sets FT_JOIN_PORT),
// `joined` true and the intercommunicator with them once they accepted it (accept()), which it
// merges (merge()) once ready to join them.
Napi::Value InitMpi(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  CommThread& thread = CommThread::Get();
  if (thread.started()) throw Napi::Error::New(env, "init: MPI was already initialized");
  int reserves = info.Length() > 0 && !info[0].IsUndefined() ? IntArg(info, 0, "init", "reserves", 0, INT32_MAX) : 0;
  SkipFinalizeFenceUnderUlfm();
  thread.Start(env);
  return thread.Submit(
      env, {},
      [reserves] {
        int provided = 0;
        MPI_CHECK(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided));
        MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
        char library[MPI_MAX_LIBRARY_VERSION_STRING] = {0};
        int length = 0;
        MPI_CHECK(MPI_Get_library_version(library, &length));
        const char* port = std::getenv(kJoinPortVariable);
        MPI_Comm world;
        if (port == nullptr) {
          if (reserves > 0) {
            if (SplitOffReserves(reserves, &world)) return Started{{}, false, provided, std::string(library), true};
          } else {
            MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &world));
          }
          // std::string(library), not `length`: it may count the NUL
          return Started{Describe(world, WorldIds(world)), false, provided, std::string(library)};
        }
        // spawned: says that its MPI runs, then waits for the spawning ranks to accept it (they go
        // on training meanwhile, and this process's main thread goes on loading). The
        // intercommunicator with them is merged once this process is ready.
        std::string joinPort = port;
        unsetenv(kJoinPortVariable);  // not for the processes this one may spawn later
        CommInfo link = ConnectToJob(joinPort, MPI_COMM_WORLD);
        return Started{link, true, provided, std::string(library)};
      },
      [](Napi::Env env, Started& started) {
        Napi::Object result = Napi::Object::New(env);
        result.Set("world", started.reserve ? env.Null() : Napi::Value(Communicator::New(env, started.world)));
        result.Set("joined", started.joined);
        result.Set("reserve", started.reserve);
        result.Set("threadLevel", started.threadLevel);
        result.Set("library", started.library);
        return result;
      });
}

// setCommTimeout(ms): how long any wait on the comm thread may last before the thread revokes the
// communicator and the call fails with CommTimeoutError (0: no limit).
Napi::Value SetCommTimeout(const Napi::CallbackInfo& info) {
  int ms = IntArg(info, 0, "setCommTimeout", "ms", 0, INT32_MAX);
  CommThread::Get().SetTimeout(std::chrono::milliseconds(ms));
  return info.Env().Undefined();
}

// setIdleProgress(ms): while the comm thread has nothing to do, it drives MPI's progress engine
// this often, so that ULFM's heartbeats go out while the main thread computes (0: never).
Napi::Value SetIdleProgress(const Napi::CallbackInfo& info) {
  int ms = IntArg(info, 0, "setIdleProgress", "ms", 0, INT32_MAX);
  CommThread::Get().SetIdleProgress(std::chrono::milliseconds(ms));
  return info.Env().Undefined();
}

// setMainComputing(computing): the main thread computes (the comm thread then polls pending
// requests between naps) or is about to wait on the comm thread.
Napi::Value SetMainComputing(const Napi::CallbackInfo& info) {
  if (!info[0].IsBoolean()) ThrowArg(info.Env(), "setMainComputing", "computing", "a boolean", info[0]);
  CommThread::Get().SetMainComputing(info[0].As<Napi::Boolean>().Value());
  return info.Env().Undefined();
}

// exitNow(code): ends the process with `code` at once, without exit()'s teardown. libuv joins its
// thread pool at exit, and a pool thread blocked for good in a write to a stuck disk (a spare
// checkpoint file's fill that was given up) would keep the process alive after its run ended. For
// a process that has written, flushed and finalized all it owes.
Napi::Value ExitNow(const Napi::CallbackInfo& info) {
  int code = IntArg(info, 0, "exitNow", "code", 0, 255);
  std::fflush(nullptr);
  _exit(code);
}

Napi::Value FinalizeMpi(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  CommThread& thread = CommThread::Get();
  if (!thread.started()) throw Napi::Error::New(env, "finalize: MPI is not initialized");
  if (!thread.accepting()) throw Napi::Error::New(env, "finalize: MPI was already finalized");
  return thread.Finalize(env);
}
}  // namespace

Napi::Object InitAddon(Napi::Env env, Napi::Object exports) {
  exports.Set("init", Napi::Function::New(env, InitMpi, "init"));
  exports.Set("finalize", Napi::Function::New(env, FinalizeMpi, "finalize"));
  exports.Set("exitNow", Napi::Function::New(env, ExitNow, "exitNow"));
  exports.Set("setCommTimeout", Napi::Function::New(env, SetCommTimeout, "setCommTimeout"));
  exports.Set("setIdleProgress", Napi::Function::New(env, SetIdleProgress, "setIdleProgress"));
  exports.Set("setMainComputing", Napi::Function::New(env, SetMainComputing, "setMainComputing"));
  exports.Set("watchdog", Napi::Function::New(env, ArmWatchdog, "watchdog"));
  exports.Set("beat", Napi::Function::New(env, Beat, "beat"));
  exports.Set("awaitWake", Napi::Function::New(env, AwaitWake, "awaitWake"));
  exports.Set("connectWoken", Napi::Function::New(env, ConnectWoken, "connectWoken"));
  exports.Set("wakeReserve", Napi::Function::New(env, WakeReserve, "wakeReserve"));
  exports.Set("dismissReserves", Napi::Function::New(env, DismissReserves, "dismissReserves"));
  exports.Set("registerErrorTypes", Napi::Function::New(env, RegisterErrorTypes, "registerErrorTypes"));
  exports.Set("ulfm", Napi::Boolean::New(env, kUlfm));
  Communicator::Init(env, exports);
  exports.Set("cpu", cpu::Exports(env));
#ifdef FT_HAVE_CUDA
  exports.Set("cuda", cuda::Exports(env));
#endif
  exports.Set("crc64", Napi::Function::New(env, Crc64, "crc64"));
  exports.Set("gatherRows", Napi::Function::New(env, GatherRows, "gatherRows"));
  exports.Set("adviseRandomRows", Napi::Function::New(env, AdviseRandomRows, "adviseRandomRows"));
  exports.Set("canPopulate", Napi::Function::New(env, CanPopulate, "canPopulate"));
  exports.Set("mapMemory", Napi::Function::New(env, MapMemory, "mapMemory"));
  exports.Set("ec", EcExports(env));
  InitFileWriter(env, exports);
  return exports;
}

}  // namespace ft

static Napi::Object Init(Napi::Env env, Napi::Object exports) { return ft::InitAddon(env, exports); }
NODE_API_MODULE(ft_train_native, Init)
