// The comm thread's queue, its loop, and the settling of Ops on the main thread.
#include "comm_thread.h"

#include <chrono>

#include "errors.h"

namespace ft {

namespace {
// After an Op the thread polls the queue this long before sleeping: the next collective usually
// follows within microseconds, and a condition-variable wake-up costs more than that. It yields
// while polling, so that the main thread settling the last Op gets the core when ranks share
// cores. Measured at 2 ranks on 2 cores: 4 KiB in 14 us (26 us with a busy spin), 1 MiB in 112 us
// (218 us without polling).
constexpr auto kSpin = std::chrono::microseconds(50);
// At process exit, how long to wait for MPI_Finalize before leaving the thread behind.
constexpr auto kExitGrace = std::chrono::seconds(5);

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

CommThread& CommThread::Get() {
  static CommThread* instance = new CommThread();  // never destroyed: may outlive a stuck thread
  return *instance;
}

void CommThread::Start(Napi::Env env) {
  tsfn_ = Tsfn::New(env, "ft-train-comm", 0, 1);
  tsfn_.Unref(env);  // only pending Ops keep the process alive
  started_ = true;
  accepting_ = true;
  thread_ = std::thread([this] { Loop(); });
  napi_add_env_cleanup_hook(env, &CommThread::AtExit, this);
}

Napi::Promise CommThread::Submit(Napi::Env env, std::unique_ptr<Op> op,
                                 std::vector<Napi::Value> pin) {
  Napi::Promise promise = op->deferred.Promise();
  for (auto& value : pin) op->pinned.push_back(Napi::Persistent(value));
  if (pending_++ == 0) tsfn_.Ref(env);
  Enqueue(op.release());
  return promise;
}

Napi::Promise CommThread::Finalize(Napi::Env env) {
  accepting_ = false;
  for (Op* op : TakeQueued()) {
    op->failure = Failure{FailureKind::kUsage, 0,
                          "MPI was finalized before this operation started"};
    tsfn_.NonBlockingCall(op);
  }
  return Submit(env, std::make_unique<FinalizeOp>(env));
}

void CommThread::Enqueue(Op* op) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.push_back(op);
    queued_.fetch_add(1, std::memory_order_release);
  }
  wake_.notify_one();
}

std::vector<Op*> CommThread::TakeQueued() {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<Op*> taken(queue_.begin(), queue_.end());
  queue_.clear();
  queued_.store(0, std::memory_order_release);
  return taken;
}

Op* CommThread::Next() {
  auto spinUntil = std::chrono::steady_clock::now() + kSpin;
  while (queued_.load(std::memory_order_acquire) == 0 &&
         std::chrono::steady_clock::now() < spinUntil) {
    std::this_thread::yield();
  }
  std::unique_lock<std::mutex> lock(mutex_);
  wake_.wait(lock, [this] { return !queue_.empty() || exitRequested_; });
  if (queue_.empty()) return nullptr;  // exit requested
  Op* op = queue_.front();
  queue_.pop_front();
  queued_.fetch_sub(1, std::memory_order_release);
  return op;
}

void CommThread::Loop() {
  for (;;) {
    Op* op = Next();
    if (op == nullptr) {  // process exit: nobody is left to settle anything
      try {
        FinalizeMpi();
      } catch (const OpException&) {
      }
      break;
    }
    try {
      op->Run();
    } catch (const OpException& e) {
      op->failure = e.failure();
    } catch (const std::exception& e) {
      op->failure = Failure{FailureKind::kUsage, 0, e.what()};
    }
    bool last = op->EndsThread();
    tsfn_.NonBlockingCall(op);
    if (last) break;
  }
  std::lock_guard<std::mutex> lock(mutex_);
  exited_ = true;
  wake_.notify_all();
}

void SettleOp(Napi::Env env, Napi::Function, void*, Op* raw) {
  std::unique_ptr<Op> op(raw);
  CommThread& self = CommThread::Get();
  if (env == nullptr) return;  // the environment is being torn down
  if (--self.pending_ == 0) self.tsfn_.Unref(env);
  if (op->EndsThread()) {
    self.thread_.join();
    self.tsfn_.Release();
    napi_remove_env_cleanup_hook(env, &CommThread::AtExit, &self);
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

// Process exit without finalize(): fail what is queued, finalize MPI if the thread is free to,
// and never hang the exit on a thread stuck in a collective.
void CommThread::AtExit(void* arg) {
  auto* self = static_cast<CommThread*>(arg);
  if (!self->thread_.joinable()) return;
  self->accepting_ = false;
  for (Op* op : self->TakeQueued()) {
    op->pinned.clear();
    delete op;
  }
  std::unique_lock<std::mutex> lock(self->mutex_);
  self->exitRequested_ = true;
  self->wake_.notify_all();
  if (self->wake_.wait_for(lock, kExitGrace, [self] { return self->exited_; })) {
    lock.unlock();
    self->thread_.join();
  } else {
    self->thread_.detach();
  }
}

}  // namespace ft
