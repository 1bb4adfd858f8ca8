// The comm thread's queue, its loop, and the settling of Ops on the main thread.
#include "mpi/comm_thread.h"

#include <mpi-ext.h>

#include <pthread.h>

#include <chrono>
#include <string>

#include "mpi/control_variables.h"
#include "mpi/errors.h"

namespace ft {

namespace {
// After an Op the thread polls the queue this long before sleeping: the next collective usually
// follows within microseconds, and a condition-variable wake-up costs more than that. It yields
// while polling, so that the main thread settling the last Op gets the core when ranks share
// cores. Measured at 2 ranks on 2 cores: 4 KiB in 14 us (26 us with a busy spin), 1 MiB in 112 us
// (218 us without polling).
constexpr auto kSpin = std::chrono::microseconds(50);
// A request still pending after kWaitSpin, plus a microsecond per kBytesPerMicrosecond of its
// data, waits on a peer that is late: polling it then naps between tests, which leaves the cores
// to the ranks still computing (several ranks share a core on small machines, and a starved rank
// misses its failure-detector heartbeats) at the cost of up to a nap's delay once the peer
// arrives. A large collective still moving its data is not late: napping through it delayed each
// of its rounds (16 MiB allreduce at 2 ranks: 3.7-3.9 ms napping after 2 ms, 3.3-3.4 polled).
constexpr auto kWaitSpin = std::chrono::milliseconds(2);
constexpr auto kWaitNap = std::chrono::microseconds(50);
constexpr size_t kBytesPerMicrosecond = 1000;  // 1 GB/s: slower than shared memory moves it
// At process exit, how long to wait for the comm thread to end before leaving it behind.
constexpr auto kExitGrace = std::chrono::seconds(5);
// After a timed-out request's communicator is revoked, how long the request may take to complete
// with the revocation before it is left to MPI.
constexpr auto kRevokeGrace = std::chrono::seconds(1);

// Open MPI's progress engine runs its event loop, where ULFM's heartbeat timer lives, on one call
// of opal_progress in 8: one idle turn makes that many calls, so every turn sends the heartbeat.
constexpr int kProgressCallsPerEventLoop = 8;

// Whether MPI's progress engine gives up the core by itself when a poll finds nothing to do:
// Open MPI does where the node is oversubscribed (its mpi_yield_when_idle). A poll loop that
// yields as well hands the core away twice per turn: at 4 ranks on 2 cores a 4 KiB allreduce took
// 56 us with both yields against 50 with MPI's alone.
bool ProgressYieldsWhenIdle() {
  std::optional<ControlVariable> yields = ControlVariable::Find("mpi_yield_when_idle");
  return yields && yields->IsSet();
}

// A request's failure. A non-blocking collective cut short by a revoke reports libnbc's internal
// error (MPI_ERR_OTHER), not MPIX_ERR_REVOKED: where this rank revoked the communicator (urgent
// revoke while it waits), and also where a peer's revoke cut one of the schedule's inner operations
// before it marked this rank's communicator revoked (seen here: "error 77", MPI_ERR_REVOKED, inside
// the schedule, MPI_ERR_OTHER out of it, the communicator not yet revoked). Under ULFM a schedule
// fails only when an inner operation did, for a failed peer or a revoke, so MPI_ERR_OTHER out of a
// request is a revocation too, as the same cut reports itself on the other ranks.
Failure RequestFailure(int rc, MPI_Comm comm, const char* call) {
  Failure failure = MpiFailure(rc, call, __FILE__, __LINE__);
#if defined(FT_HAVE_MPIX_COMM_IS_REVOKED) && defined(MPIX_ERR_REVOKED)
  int revoked = 0;
  if (MPIX_Comm_is_revoked(comm, &revoked) == MPI_SUCCESS && revoked) failure.errorClass = MPIX_ERR_REVOKED;
  if (failure.errorClass == MPI_ERR_OTHER) failure.errorClass = MPIX_ERR_REVOKED;
#else
  (void)comm;
#endif
  return failure;
}

void FinalizeMpi() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_CHECK(MPI_Finalize());
}

class FinalizeOp : public Op {
 public:
  using Op::Op;
  void Run() override { FinalizeMpi(); }
  Napi::Value Result(Napi::Env env) override { return env.Undefined(); }
  bool EndsThread() const override { return true; }
};
}  // namespace

// One turn of MPI's progress engine, between MPI_Init and MPI_Finalize: probes on COMM_SELF,
// where no failure can be reported.
void DriveProgress() {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (!initialized || finalized) return;
  for (int call = 0; call < kProgressCallsPerEventLoop; ++call) {
    int flag = 0;
    MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_SELF, &flag, MPI_STATUS_IGNORE);
  }
}

CommThread& CommThread::Get() {
  static CommThread* instance = new CommThread();  // never destroyed: may outlive a stuck thread
  return *instance;
}

void CommThread::Start(Napi::Env env) {
  env_ = env;
  asyncContext_ = std::make_unique<Napi::AsyncContext>(env, "ft-train-comm");
  uv_loop_t* loop = nullptr;
  NAPI_THROW_IF_FAILED_VOID(env, napi_get_uv_event_loop(env, &loop));
  uv_async_init(loop, &handedBack_, &CommThread::OnHandedBack);
  uv_unref(reinterpret_cast<uv_handle_t*>(&handedBack_));  // only pending Ops keep the process alive
  started_ = true;
  accepting_ = true;
  thread_ = std::thread([this] {
    pthread_setname_np(pthread_self(), "ft-comm");  // in top, ps -L and perf
    Loop();
  });
  napi_add_env_cleanup_hook(env, &CommThread::AtExit, this);
}

Napi::Promise CommThread::Track(Op* op) {
  if (pending_++ == 0) uv_ref(reinterpret_cast<uv_handle_t*>(&handedBack_));
  return op->deferred.Promise();
}

Napi::Promise CommThread::Submit(std::unique_ptr<Op> op, std::vector<Napi::Value> pin) {
  for (auto& value : pin) op->pinned.push_back(Napi::Persistent(value));
  Napi::Promise promise = Track(op.get());
  Enqueue(op.release(), /*urgent=*/false);
  return promise;
}

Napi::Promise CommThread::SubmitUrgent(std::unique_ptr<Op> op) {
  Napi::Promise promise = Track(op.get());
  Enqueue(op.release(), /*urgent=*/true);
  return promise;
}

Napi::Promise CommThread::Finalize(Napi::Env env) {
  accepting_ = false;
  for (Op* op : TakeQueued()) {
    op->failure = Failure{FailureKind::kUsage, 0,
                          "MPI was finalized before this operation started"};
    HandBack(op);
  }
  return Submit(std::make_unique<FinalizeOp>(env));
}

void CommThread::Enqueue(Op* op, bool urgent) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    (urgent ? urgent_ : queue_).push_back(op);
    if (urgent) urgentQueued_.fetch_add(1, std::memory_order_release);
    queued_.fetch_add(1, std::memory_order_release);
  }
  wake_.notify_one();
}

std::vector<Op*> CommThread::TakeQueued() {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<Op*> taken(urgent_.begin(), urgent_.end());
  taken.insert(taken.end(), queue_.begin(), queue_.end());
  urgent_.clear();
  queue_.clear();
  urgentQueued_.store(0, std::memory_order_release);
  queued_.store(0, std::memory_order_release);
  return taken;
}

Op* CommThread::Next() {
  auto spinUntil = std::chrono::steady_clock::now() + kSpin;
  while (queued_.load(std::memory_order_acquire) == 0 && !mainComputing_.load(std::memory_order_relaxed) &&
         std::chrono::steady_clock::now() < spinUntil) {
    std::this_thread::yield();
  }
  std::unique_lock<std::mutex> lock(mutex_);
  auto ready = [this] { return !queue_.empty() || !urgent_.empty() || exitRequested_; };
  while (!ready()) {
    const long long period = idleProgressMs_.load();
    if (period <= 0) {
      wake_.wait(lock);
      continue;
    }
    if (wake_.wait_for(lock, std::chrono::milliseconds(period), ready)) break;
    lock.unlock();
    DriveProgress();
    lock.lock();
  }
  std::deque<Op*>& from = urgent_.empty() ? queue_ : urgent_;
  if (from.empty()) return nullptr;  // exit requested
  Op* op = from.front();
  from.pop_front();
  if (&from == &urgent_) urgentQueued_.fetch_sub(1, std::memory_order_release);
  queued_.fetch_sub(1, std::memory_order_release);
  return op;
}

void CommThread::RunOp(Op* op) {
  Op* outer = current_;
  current_ = op;
  busy_.store(true);
  try {
    op->Run();
  } catch (const OpException& e) {
    op->failure = e.failure();
  } catch (const std::exception& e) {
    op->failure = Failure{FailureKind::kUsage, 0, e.what()};
  }
  current_ = outer;
  busy_.store(outer != nullptr);
  HandBack(op);
}

void CommThread::HandBack(Op* op) {
  {
    std::lock_guard<std::mutex> lock(handBackMutex_);
    // process exit: the main thread settles nothing more (see AtExit)
    if (handBackClosed_) return;
    handedBackOps_.push_back(op);
  }
  // Outside the lock; libuv makes a send racing AtExit's uv_close safe (uv__async_spin).
  uv_async_send(&handedBack_);
}

void CommThread::OnHandedBack(uv_async_t*) {
  CommThread& self = Get();
  {
    std::lock_guard<std::mutex> lock(self.handBackMutex_);
    self.settling_.swap(self.handedBackOps_);
  }
  Napi::Env env(self.env_);
  Napi::HandleScope scope(env);
  Napi::CallbackScope callbackScope(env, *self.asyncContext_);
  try {
    for (Op* op : self.settling_) self.Settle(env, op);
  } catch (const Napi::Error& e) {
    napi_fatal_exception(env, e.Value());
  }
  self.settling_.clear();
}

void CommThread::RunUrgent() {
  while (urgentQueued_.load(std::memory_order_acquire) > 0) {
    Op* op = nullptr;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (urgent_.empty()) return;
      op = urgent_.front();
      urgent_.pop_front();
      urgentQueued_.fetch_sub(1, std::memory_order_release);
      queued_.fetch_sub(1, std::memory_order_release);
    }
    RunOp(op);
  }
}

void CommThread::Wait(MPI_Request* request, MPI_Comm comm, const char* call, size_t bytes) {
  using Clock = std::chrono::steady_clock;
  const auto started = Clock::now();
  const auto spin = kWaitSpin + std::chrono::microseconds(bytes / kBytesPerMicrosecond);
  auto spinUntil = started + spin;
  const long long timeoutMs = timeoutMs_.load();
  bool revoked = false;
  Clock::time_point giveUpAt;
  auto timedOut = [&](const char* what) {
    return OpException(Failure{
        FailureKind::kTimeout, 0,
        std::string(call) + " did not complete within " + std::to_string(timeoutMs) +
            " ms: a peer stopped making progress; the communicator was revoked" + what});
  };
  for (;;) {
    int done = 0;
    int rc = MPI_Test(request, &done, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS) {
      if (revoked) throw timedOut("");
      throw OpException(RequestFailure(rc, comm, call));
    }
    if (done) {
      if (revoked) throw timedOut("");
      return;
    }
    RunUrgent();
    const auto now = Clock::now();
    if (!revoked && timeoutMs > 0 && now - started > std::chrono::milliseconds(timeoutMs)) {
#ifdef FT_HAVE_MPIX_COMM_REVOKE
      MPIX_Comm_revoke(comm);  // the peers' pending calls on comm fail too
#else
      (void)comm;
#endif
      revoked = true;
      giveUpAt = now + kRevokeGrace;
    }
    if (revoked && now > giveUpAt) {
      if (current_ != nullptr) current_->abandoned = true;
      throw timedOut(" (its request was left to MPI)");
    }
    if (mainComputing_.load(std::memory_order_relaxed)) {
      std::this_thread::sleep_for(kWaitNap);
      spinUntil = Clock::now() + spin;  // the main thread will wait on it soon: poll closely then
    } else if (now < spinUntil) {
      if (!progressYields_) progressYields_ = ProgressYieldsWhenIdle();
      if (!*progressYields_) std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(kWaitNap);
    }
  }
}

void CommThread::Loop() {
  for (;;) {
    Op* op = Next();
    // Process exit without finalize(): leave MPI as it is. A rank that finalizes on its way out
    // is not a failure in ULFM's eyes and its peers would wait for it forever; one that leaves
    // without finalizing is, and they recover.
    if (op == nullptr) break;
    bool last = op->EndsThread();
    RunOp(op);
    if (last) break;
  }
  std::lock_guard<std::mutex> lock(mutex_);
  exited_ = true;
  wake_.notify_all();
}

void CommThread::Settle(Napi::Env env, Op* raw) {
  std::unique_ptr<Op> op(raw);
  if (--pending_ == 0) uv_unref(reinterpret_cast<uv_handle_t*>(&handedBack_));
  if (op->abandoned) {  // MPI may still write into these buffers: never unpin them
    static auto* leftToMpi = new std::vector<Napi::Reference<Napi::Value>>();
    for (auto& ref : op->pinned) leftToMpi->push_back(std::move(ref));
  }
  if (op->EndsThread()) {
    thread_.join();
    uv_close(reinterpret_cast<uv_handle_t*>(&handedBack_), nullptr);
    napi_remove_env_cleanup_hook(env, &CommThread::AtExit, this);
  }
  if (op->failure) {
    op->deferred.Reject(MakeError(env, *op->failure));
    return;
  }
  try {
    op->deferred.Resolve(op->Result(env));
  } catch (const Napi::Error& e) {
    op->deferred.Reject(e.Value());
  }
}

// Process exit without finalize(): drop what is queued, let the thread end (without finalizing
// MPI: see Loop), and never hang the exit on a thread stuck in an MPI call.
void CommThread::AtExit(void* arg) {
  auto* self = static_cast<CommThread*>(arg);
  if (!self->thread_.joinable()) return;
  self->accepting_ = false;
  std::vector<Op*> unsettled = self->TakeQueued();
  {
    std::lock_guard<std::mutex> lock(self->handBackMutex_);
    self->handBackClosed_ = true;
    unsettled.insert(unsettled.end(), self->handedBackOps_.begin(), self->handedBackOps_.end());
    self->handedBackOps_.clear();
  }
  uv_close(reinterpret_cast<uv_handle_t*>(&self->handedBack_), nullptr);
  for (Op* op : unsettled) {
    op->pinned.clear();
    delete op;
  }
  std::unique_lock<std::mutex> lock(self->mutex_);
  self->exitRequested_ = true;
  self->wake_.notify_all();
  // a thread inside an MPI call (start-up, a shrink) that never returned: nothing to wait for
  const auto grace = self->busy_.load() ? std::chrono::seconds(0) : kExitGrace;
  if (self->wake_.wait_for(lock, grace, [self] { return self->exited_; })) {
    lock.unlock();
    self->thread_.join();
  } else {
    self->thread_.detach();
  }
}

}  // namespace ft
