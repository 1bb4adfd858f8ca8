// Asynchronous signals held while a CPU kernel runs. oneDNN 2.6's JIT GEMM (its sgemm, and the
// GEMM-based convolutions) points the stack pointer into a heap buffer while it runs (oneDNN issue
// 4845, fixed in 3.x), so a signal handled on that thread (the SIGTERM that asks a rank to
// checkpoint and stop, a profiler's SIGPROF) wrote its frame into the heap ("corrupted size vs.
// prev_size while consolidating"). Every kernel entry holds them (cpu_module.cc), and OpenMP starts
// its worker threads only from inside a kernel, so the workers inherit the held mask and never take
// one: the kernel hands a process-directed signal to another thread, or it waits for the return.
#pragma once
#include <pthread.h>
#include <signal.h>

namespace ft::cpu {

// The calling thread's signals, but those a fault of the thread itself raises (which cannot wait),
// wait while this lives, then are handled as usual.
class SignalsHeld {
 public:
  SignalsHeld() {
    sigset_t signals;
    sigfillset(&signals);
    for (int fault : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP}) sigdelset(&signals, fault);
    pthread_sigmask(SIG_BLOCK, &signals, &previous_);
  }
  ~SignalsHeld() { pthread_sigmask(SIG_SETMASK, &previous_, nullptr); }
  SignalsHeld(const SignalsHeld&) = delete;
  SignalsHeld& operator=(const SignalsHeld&) = delete;

 private:
  sigset_t previous_;
};

}  // namespace ft::cpu
