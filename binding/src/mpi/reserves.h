// Reserves (--reserves R): the launch's last R processes, kept out of training and asleep until a
// rank of the job wakes one to replace a lost rank. A woken reserve joins as a spawned process
// does (it connects to the port it is given and is accepted and merged the same way), but it has
// started long before, and it belongs to the launch's own job: Open MPI 5.0's shared-memory
// transport serves only processes of one job, so a spawned process talks to the others over TCP
// for the rest of the run, and a woken reserve over shared memory.
#pragma once

#include <mpi.h>
#include <napi.h>

namespace ft {

// Comm thread, in init(): MPI_Comm_split of MPI_COMM_WORLD (collective over the launch) that
// leaves its last `reserves` processes out of `world`; true on a reserve (`world` then untouched).
bool SplitOffReserves(int reserves, MPI_Comm* world);

// awaitWake(): on a reserve; resolves once a rank wakes it, with { port, args } (the port to
// connect to, and the arguments its job's ranks give a rank they spawn), with
// "dismissed" when the run ended, or with "abandoned" when every process before it in the launch
// failed (none is left to wake it).
Napi::Value AwaitWake(const Napi::CallbackInfo& info);

// connectWoken(port): on a woken reserve, as a spawned process does: says that its MPI runs, then
// MPI_Comm_connect to `port` (blocking until the waking ranks accept: bound it from JS); the
// intercommunicator with them, to merge.
Napi::Value ConnectWoken(const Napi::CallbackInfo& info);

// wakeReserve(worldRank, args): on a rank of the launch's job, not collective: sends the reserve
// at MPI_COMM_WORLD rank `worldRank` a port (MPI_Open_port) and `args`, and resolves with the port,
// which it connects to as a spawned process does (see Communicator::Spawn).
Napi::Value WakeReserve(const Napi::CallbackInfo& info);

// dismissReserves(worldRanks): on a rank of the launch's job: tells those reserves that the run
// ended (they finalize and exit 0); one already gone or woken, or this process, is passed over.
Napi::Value DismissReserves(const Napi::CallbackInfo& info);

}  // namespace ft
