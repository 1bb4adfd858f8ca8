// Communicator: a JS object over one MPI communicator (a dup of COMM_WORLD, one derived from it,
// or a spawn's intercommunicator; always with MPI_ERRORS_RETURN). Methods check their arguments
// here, on the main thread, then queue a closure for the comm thread and return its Promise.
#pragma once
#include <mpi.h>
#include <napi.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace ft {

// The intercommunicator between ranks that spawned processes and those processes, until they
// merge: the spawned ones merge once ready (their code loaded), saying so first to the spawn's
// root, which posted one receive per spawned process. Comm thread only, but for `spawning` and `firstId`.
struct SpawnLink {
  bool spawning;  // this side spawned the other
  int firstId;    // the ids the spawned processes take (the spawning side's)
  std::vector<int> ready;
  std::vector<MPI_Request> requests;  // the root's receives of `ready`, MPI_REQUEST_NULL once complete
};

// The environment variable that gives a spawned process the port of the ranks that spawned it.
inline constexpr const char* kJoinPortVariable = "FT_JOIN_PORT";

// The name a spawned process (rank `rank` of those started together) publishes once its MPI runs
// and it waits to connect to `port`.
inline std::string UpServiceName(const std::string& port, int rank) {
  return "ft-train-up:" + port + ":" + std::to_string(rank);
}

// What the comm thread learns about a new communicator.
struct CommInfo {
  MPI_Comm comm;
  int rank;
  int size;
  std::vector<int> worldRanks;  // worldRanks[r] = the id of rank r here (see communicator.cc)
  std::shared_ptr<SpawnLink> link;  // an intercommunicator of a spawn, not yet merged
};

// Comm thread: sets MPI_ERRORS_RETURN on `comm` and describes it, its ranks named by `ids`.
CommInfo Describe(MPI_Comm comm, std::vector<int> ids);

// Comm thread: the ids of `comm`'s ranks, made of processes of this job's MPI_COMM_WORLD.
std::vector<int> WorldIds(MPI_Comm comm);

// Comm thread: the MPI_COMM_WORLD ranks of `group`'s processes (all of this job's MPI_COMM_WORLD).
std::vector<int> WorldRanksOf(MPI_Group group);

// Comm thread: collective over a communicator merged from spawning ranks (first, passing their
// ids) and the processes they spawned (last, passing -1): every rank's id, the spawned ones
// numbered from `firstId` (which the spawning ranks pass, the spawned -1).
std::vector<int> MergedIds(MPI_Comm merged, int myId, int firstId);

// Comm thread, on processes started to join a running job (spawned, or woken reserves): says that
// their MPI runs (the name spawnedUp() looks up), then MPI_Comm_connect over `comm` to `port`,
// which blocks until the job's ranks accept(). The intercommunicator with them, to merge().
CommInfo ConnectToJob(const std::string& port, MPI_Comm comm);

class Communicator : public Napi::ObjectWrap<Communicator> {
 public:
  static void Init(Napi::Env env, Napi::Object exports);
  static Napi::Object New(Napi::Env env, const CommInfo& info);  // main thread
  explicit Communicator(const Napi::CallbackInfo& info);

 private:
  Napi::Value Rank(const Napi::CallbackInfo& info);
  Napi::Value Size(const Napi::CallbackInfo& info);
  Napi::Value WorldRanks(const Napi::CallbackInfo& info);
  Napi::Value Allreduce(const Napi::CallbackInfo& info);
  Napi::Value Bcast(const Napi::CallbackInfo& info);
  Napi::Value Barrier(const Napi::CallbackInfo& info);
  Napi::Value Allgather(const Napi::CallbackInfo& info);
  Napi::Value Allgatherv(const Napi::CallbackInfo& info);
  Napi::Value Alltoallv(const Napi::CallbackInfo& info);
  Napi::Value Revoke(const Napi::CallbackInfo& info);
  Napi::Value IsRevoked(const Napi::CallbackInfo& info);
  Napi::Value Shrink(const Napi::CallbackInfo& info);
  Napi::Value Split(const Napi::CallbackInfo& info);
  Napi::Value Spawn(const Napi::CallbackInfo& info);
  Napi::Value SpawnedUp(const Napi::CallbackInfo& info);
  Napi::Value Accept(const Napi::CallbackInfo& info);
  Napi::Value SpawnedReady(const Napi::CallbackInfo& info);
  Napi::Value Merge(const Napi::CallbackInfo& info);
  Napi::Value Agree(const Napi::CallbackInfo& info);
  Napi::Value GetFailed(const Napi::CallbackInfo& info);
  Napi::Value Free(const Napi::CallbackInfo& info);

  // The handle for `method`; throws if freed or if MPI is finalized.
  MPI_Comm Handle(Napi::Env env, const char* method) const;

  CommInfo info_{};
  bool freed_ = false;
};

}  // namespace ft
