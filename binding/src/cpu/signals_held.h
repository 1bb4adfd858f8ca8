// Asynchronous signals kept off oneDNN's JIT sgemm. oneDNN 2.6's sgemm keeps data below its stack
// pointer beyond the 128 bytes a signal handler leaves alone: a signal handled on a thread in the
// middle of a product (the SIGTERM that asks a rank to checkpoint and stop, a profiler's SIGPROF)
// corrupted the heap ("corrupted size vs. prev_size while consolidating"). The caller's thread holds
// them while it runs (SignalsHeld); OpenMP's workers never take them (BlockAsynchronousSignals).
#pragma once
#include <pthread.h>
#include <signal.h>

namespace ft::cpu {

// Every signal but those a fault of the thread itself raises (which cannot wait).
inline sigset_t AsynchronousSignals() {
  sigset_t signals;
  sigfillset(&signals);
  for (int fault : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP}) sigdelset(&signals, fault);
  return signals;
}

// The calling thread's asynchronous signals wait while this lives, then are handled as usual.
class SignalsHeld {
 public:
  SignalsHeld() {
    sigset_t signals = AsynchronousSignals();
    pthread_sigmask(SIG_BLOCK, &signals, &previous_);
  }
  ~SignalsHeld() { pthread_sigmask(SIG_SETMASK, &previous_, nullptr); }
  SignalsHeld(const SignalsHeld&) = delete;
  SignalsHeld& operator=(const SignalsHeld&) = delete;

 private:
  sigset_t previous_;
};

// The calling thread never takes an asynchronous signal again (another thread handles it).
inline void BlockAsynchronousSignals() {
  sigset_t signals = AsynchronousSignals();
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
}

}  // namespace ft::cpu
