// The comm thread: one dedicated thread owns every MPI call (Horovod's background loop). JS
// enqueues an Op and gets a Promise; the thread runs the Op and hands it back to the main thread
// through a libuv async handle, which settles the Promise. The event loop never blocks on MPI.
// Collectives and agreements are started non-blocking and polled (Wait) against a deadline, so
// that none waits unbounded and an urgent Op (revoke) runs even while one is stuck: it never queues
// behind it. Past the deadline the thread revokes the communicator itself and the Op fails with a
// timeout (CommTimeoutError in JS). MPI's blocking calls (init, shrink, finalize: Open MPI 5.0 has
// no non-blocking shrink) are bounded from JS instead (withDeadline), which then ends the process.
#pragma once
#include <napi.h>
#include <uv.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "mpi/mpi_check.h"

namespace ft {

// One unit of MPI work. Constructed and settled on the main thread, run on the comm thread.
class Op {
 public:
  explicit Op(Napi::Env env) : deferred(Napi::Promise::Deferred::New(env)) {}
  virtual ~Op() = default;
  virtual void Run() = 0;                         // comm thread; throws OpException
  virtual Napi::Value Result(Napi::Env env) = 0;  // main thread, after Run succeeded
  virtual bool EndsThread() const { return false; }  // true for MPI_Finalize

  Napi::Promise::Deferred deferred;
  std::optional<Failure> failure;
  // A timed-out request was left to MPI: its buffers stay pinned for the life of the process.
  bool abandoned = false;
  // JS values whose memory the MPI call uses: kept alive until the Op settles.
  std::vector<Napi::Reference<Napi::Value>> pinned;
};

// An Op from two lambdas: `run` on the comm thread returns a T, `toJs` turns it into a JS value.
template <typename T>
class LambdaOp : public Op {
 public:
  LambdaOp(Napi::Env env, std::function<T()> run, std::function<Napi::Value(Napi::Env, T&)> toJs)
      : Op(env), run_(std::move(run)), toJs_(std::move(toJs)) {}
  void Run() override { value_.emplace(run_()); }
  Napi::Value Result(Napi::Env env) override { return toJs_(env, *value_); }

 private:
  std::function<T()> run_;
  std::function<Napi::Value(Napi::Env, T&)> toJs_;
  std::optional<T> value_;
};

struct Unit {};

// Comm thread: one turn of MPI's progress engine (probes on COMM_SELF, where no failure can be
// reported), so that ULFM's heartbeats go out; a no-op outside MPI_Init..MPI_Finalize.
void DriveProgress();

class CommThread {
 public:
  static CommThread& Get();

  // Starts the thread (main thread; once per process).
  void Start(Napi::Env env);
  bool started() const { return started_; }  // stays true after finalize: MPI inits once
  bool accepting() const { return accepting_; }

  // Queues `op` (main thread) and returns its Promise. Pins `pin` until it settles.
  Napi::Promise Submit(std::unique_ptr<Op> op, std::vector<Napi::Value> pin = {});

  // Queues `op` ahead of all others; it also runs while another Op is in Wait (revoke).
  Napi::Promise SubmitUrgent(std::unique_ptr<Op> op);

  // Main thread: how long Wait lets a request run before revoking its communicator (0: forever).
  void SetTimeout(std::chrono::milliseconds timeout) { timeoutMs_.store(timeout.count()); }

  // Main thread: while idle, drive MPI's progress engine this often (0: never). ULFM's failure
  // detector, in its thread-less mode, sends and checks heartbeats only from MPI's progress: an
  // idle comm thread would otherwise look dead to its peers while the main thread computes.
  void SetIdleProgress(std::chrono::milliseconds period) {
    {
      // under the mutex: a comm thread that just read the old period must be waiting when notified
      std::lock_guard<std::mutex> lock(mutex_);
      idleProgressMs_.store(period.count());
    }
    wake_.notify_one();
  }

  // Main thread: whether it is computing (true) or about to wait for the comm thread (false).
  // While it computes, a pending request is polled between naps, not by yielding in a loop: the
  // two threads often share a core (mpirun binds a rank to one), and a yielding poller halves the
  // computation it is meant to overlap.
  void SetMainComputing(bool computing) { mainComputing_.store(computing, std::memory_order_relaxed); }

  // Comm thread: polls `request`, started by `call` on `comm` to move `bytes`, running urgent Ops meanwhile.
  // Throws the request's failure; past the timeout revokes `comm` and throws a kTimeout failure
  // (once the revoke has completed the request, or after a grace period, leaving it to MPI).
  void Wait(MPI_Request* request, MPI_Comm comm, const char* call, size_t bytes = 0);

  // Fails every queued Op that has not started, then queues MPI_Finalize, which ends the thread.
  Napi::Promise Finalize(Napi::Env env);

  template <typename Run, typename ToJs>
  Napi::Promise Submit(Napi::Env env, std::vector<Napi::Value> pin, Run run, ToJs toJs) {
    using T = decltype(run());
    return Submit(std::make_unique<LambdaOp<T>>(env, std::move(run), std::move(toJs)), std::move(pin));
  }

  template <typename Run, typename ToJs>
  Napi::Promise SubmitUrgent(Napi::Env env, Run run, ToJs toJs) {
    using T = decltype(run());
    return SubmitUrgent(std::make_unique<LambdaOp<T>>(env, std::move(run), std::move(toJs)));
  }

 private:
  static void AtExit(void* self);
  static void OnHandedBack(uv_async_t* handle);

  void Loop();
  Op* Next();
  void Enqueue(Op* op, bool urgent);
  std::vector<Op*> TakeQueued();
  void RunOp(Op* op);      // comm thread: runs and hands back one Op
  void HandBack(Op* op);   // any thread: queues `op` for settling on the main thread
  void Settle(Napi::Env env, Op* op);  // main thread: settles `op`, then deletes it
  void RunUrgent();        // comm thread: runs every queued urgent Op
  Napi::Promise Track(Op* op);

  // Main thread only.
  napi_env env_ = nullptr;
  std::unique_ptr<Napi::AsyncContext> asyncContext_;  // microtasks run as the settling ends
  uv_async_t handedBack_;  // referenced while Ops are pending: they keep the process alive
  std::vector<Op*> settling_;
  size_t pending_ = 0;
  bool started_ = false;
  bool accepting_ = false;

  std::thread thread_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<Op*> queue_;
  std::deque<Op*> urgent_;
  // Ops run, to be settled. Its own mutex, never held while signalling the main thread: a main
  // thread woken by the signal would block on it (when both threads share a core, every time).
  std::mutex handBackMutex_;
  std::vector<Op*> handedBackOps_;  // guarded by handBackMutex_
  bool handBackClosed_ = false;     // guarded by handBackMutex_
  std::atomic<size_t> queued_{0};   // both queues
  std::atomic<size_t> urgentQueued_{0};
  std::atomic<long long> timeoutMs_{0};
  std::atomic<long long> idleProgressMs_{0};
  std::atomic<bool> mainComputing_{false};
  Op* current_ = nullptr;  // comm thread only: the Op being run
  std::optional<bool> progressYields_;  // comm thread only: MPI's polls yield when idle (known once MPI runs)
  std::atomic<bool> busy_{false};  // an Op is running (process exit does not wait for it)
  bool exitRequested_ = false;  // guarded by mutex_
  bool exited_ = false;         // guarded by mutex_
};

}  // namespace ft
