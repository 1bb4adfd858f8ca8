// The progress watchdog's thread: wakes a few times per timeout and kills the process when the
// last beat is older than the timeout.
#include "mpi/watchdog.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

#include "args.h"

namespace ft {

namespace {
using Clock = std::chrono::steady_clock;

long long NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now().time_since_epoch())
      .count();
}

// Never destroyed: the thread may still look at it while the process exits.
struct State {
  std::mutex mutex;
  std::condition_variable changed;
  std::atomic<long long> lastBeatMs{0};
  long long timeoutMs = 0;  // guarded by mutex; 0: disarmed
  std::string line;         // guarded by mutex
  bool running = false;     // guarded by mutex
};

State& Watch() {
  static State* state = new State();
  return *state;
}

void Loop(State* state) {
  std::unique_lock<std::mutex> lock(state->mutex);
  for (;;) {
    if (state->timeoutMs == 0) {
      state->changed.wait(lock);
      continue;
    }
    long long timeout = state->timeoutMs;
    state->changed.wait_for(lock, std::chrono::milliseconds(std::max(1LL, timeout / 4)));
    if (state->timeoutMs == 0) continue;
    if (NowMs() - state->lastBeatMs.load() > state->timeoutMs) {
      std::string out = state->line + "\n";
      ssize_t written = write(STDERR_FILENO, out.data(), out.size());
      (void)written;
      kill(getpid(), SIGKILL);
    }
  }
}
}  // namespace

Napi::Value ArmWatchdog(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  int timeoutMs = IntArg(info, 0, "watchdog", "timeoutMs", 0, INT32_MAX);
  if (info.Length() < 2 || !info[1].IsString()) ThrowArg(env, "watchdog", "line", "a string", info[1]);
  State& state = Watch();
  {
    std::lock_guard<std::mutex> lock(state.mutex);
    state.lastBeatMs.store(NowMs());
    state.timeoutMs = timeoutMs;
    state.line = info[1].As<Napi::String>().Utf8Value();
    if (!state.running && timeoutMs > 0) {
      state.running = true;
      std::thread(Loop, &state).detach();
    }
  }
  state.changed.notify_all();
  return env.Undefined();
}

Napi::Value Beat(const Napi::CallbackInfo& info) {
  Watch().lastBeatMs.store(NowMs());
  return info.Env().Undefined();
}

}  // namespace ft
