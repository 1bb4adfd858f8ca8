// The progress watchdog. A rank whose main thread stops (a kernel that never returns, a blocked
// synchronous write, an endless loop) cannot notice it itself, and its peers' failure detector
// still hears its heartbeats, which come from another thread. JS calls beat() from a timer; when
// beats stop for the timeout, a native thread prints the armed line and SIGKILLs the process,
// which turns the hang into an ordinary process failure that the survivors recover from.
#pragma once
#include <napi.h>

namespace ft {

// watchdog(timeoutMs, line): (re)arms with a fresh beat; timeoutMs 0 disarms.
Napi::Value ArmWatchdog(const Napi::CallbackInfo& info);

// beat(): the main thread is alive.
Napi::Value Beat(const Napi::CallbackInfo& info);

}  // namespace ft
