// The Communicator's methods: collectives, the ULFM calls (revoke, shrink, agree, getFailed), and
// the calls that make communicators of some or more processes (split, spawn and accept). A communicator names
// its processes by ids that outlive it: MPI_COMM_WORLD ranks for the job's own processes, ids the
// spawning ranks hand out for those they start (their MPI_COMM_WORLD is a different one).
#include "mpi/communicator.h"

#include <mpi-ext.h>
#ifdef FT_HAVE_PMIX
#include <pmix.h>
#include <unistd.h>
#endif

#include <cstring>

#include "args.h"
#include "mpi/comm_thread.h"
#include "mpi/control_variables.h"

namespace ft {

namespace {
Napi::FunctionReference& Constructor() {
  static Napi::FunctionReference* ctor = new Napi::FunctionReference();
  return *ctor;
}

// Marks the external handed to the constructor by New(), so JS cannot construct one itself.
char kToken = 0;

// The tag of a spawned process's "ready" to the spawning side's rank 0.
constexpr int kReadyTag = 0x5e4d;

Napi::Value Undefined(Napi::Env env, Unit&) { return env.Undefined(); }

// The bytes of `buffer` (comm thread: asks MPI the size of its type).
size_t BytesOf(const Buffer& buffer) {
  int typeBytes = 0;
  MPI_CHECK(MPI_Type_size(buffer.type, &typeBytes));
  return static_cast<size_t>(buffer.count) * static_cast<size_t>(typeBytes);
}

// libnbc's algorithm for the MPI_Iallreduce of `bytes`, set per call through MPI_T (every rank
// makes the same choice: it depends on the size alone). Its ring (mpirun's --mca setting: its
// in-place default, a binomial reduce then broadcast, took 2.1 ms for 4 MiB at 2 ranks against the
// ring's 0.42) moves each byte the fewest times but in 2(p - 1) rounds, each a hand-off between
// ranks that may share a core. Up to kFewRoundsBytes Rabenseifner's reduce-scatter + allgather, in
// 2 log p rounds, is faster: at 4 ranks on 2 cores 4 KiB took 49 us against 58, 64 KiB 118 against
// 141 (no slower at 2 ranks). Where MPI has no such variable, mpirun's setting stands.
constexpr size_t kFewRoundsBytes = 64 << 10;
constexpr int kLibnbcRing = 1;
constexpr int kLibnbcRabenseifner = 3;

void ChooseIallreduceAlgorithm(size_t bytes) {
  static std::optional<ControlVariable> algorithm = ControlVariable::Find("coll_libnbc_iallreduce_algorithm");
  static int chosen = 0;
  const int wanted = bytes <= kFewRoundsBytes ? kLibnbcRabenseifner : kLibnbcRing;
  if (!algorithm || wanted == chosen) return;
  if (algorithm->Write(wanted)) chosen = wanted;
}

// The ids of `group`'s processes, from the ids of `comm`'s (every process of `group` is in `comm`).
std::vector<int> IdsOf(MPI_Group group, MPI_Comm comm, const std::vector<int>& commIds) {
  MPI_Group within;
  MPI_CHECK(MPI_Comm_group(comm, &within));
  int size = 0;
  MPI_CHECK(MPI_Group_size(group, &size));
  std::vector<int> ranks(size), translated(size), ids(size);
  for (int i = 0; i < size; ++i) ranks[i] = i;
  MPI_CHECK(MPI_Group_translate_ranks(group, size, ranks.data(), within, translated.data()));
  MPI_CHECK(MPI_Group_free(&within));
  for (int i = 0; i < size; ++i) ids[i] = commIds.at(translated[i]);
  return ids;
}

// The ids of `part`'s ranks, `part` made of processes of `comm`.
std::vector<int> IdsWithin(MPI_Comm part, MPI_Comm comm, const std::vector<int>& commIds) {
  MPI_Group group;
  MPI_CHECK(MPI_Comm_group(part, &group));
  std::vector<int> ids = IdsOf(group, comm, commIds);
  MPI_CHECK(MPI_Group_free(&group));
  return ids;
}

Napi::Array ToArray(Napi::Env env, const std::vector<int>& values) {
  Napi::Array array = Napi::Array::New(env, values.size());
  for (size_t i = 0; i < values.size(); ++i) array.Set(static_cast<uint32_t>(i), values[i]);
  return array;
}

void RequireSameType(Napi::Env env, const char* method, const Buffer& send, const Buffer& recv) {
  if (send.kind != recv.kind) {
    ThrowArg(env, method, "recvbuf", "the same kind of typed array as sendbuf", recv.value);
  }
}
}  // namespace

CommInfo Describe(MPI_Comm comm, std::vector<int> ids) {
  MPI_CHECK(MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN));
  CommInfo info{comm, 0, 0, std::move(ids), nullptr};
  MPI_CHECK(MPI_Comm_rank(comm, &info.rank));
  MPI_CHECK(MPI_Comm_size(comm, &info.size));
  return info;
}

std::vector<int> WorldIds(MPI_Comm comm) {
  MPI_Group group;
  MPI_CHECK(MPI_Comm_group(comm, &group));
  std::vector<int> ranks = WorldRanksOf(group);
  MPI_CHECK(MPI_Group_free(&group));
  return ranks;
}

std::vector<int> WorldRanksOf(MPI_Group group) {
  int size = 0;
  MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &size));
  std::vector<int> worldIds(size);
  for (int i = 0; i < size; ++i) worldIds[i] = i;
  return IdsOf(group, MPI_COMM_WORLD, worldIds);
}

std::vector<int> MergedIds(MPI_Comm merged, int myId, int firstId) {
  int size = 0;
  MPI_CHECK(MPI_Comm_size(merged, &size));
  int mine[2] = {myId, firstId};
  std::vector<int> pairs(2 * size);
  MPI_Request request;
  MPI_CHECK(MPI_Iallgather(mine, 2, MPI_INT, pairs.data(), 2, MPI_INT, merged, &request));
  CommThread::Get().Wait(&request, merged, "MPI_Iallgather");
  int spawners = 0;
  while (spawners < size && pairs[2 * spawners] >= 0) ++spawners;
  std::vector<int> ids(size);
  for (int i = 0; i < size; ++i) ids[i] = i < spawners ? pairs[2 * i] : pairs[1] + i - spawners;
  return ids;
}

void Communicator::Init(Napi::Env env, Napi::Object exports) {
  Napi::Function ctor = DefineClass(
      env, "Communicator",
      {
          InstanceAccessor<&Communicator::Rank>("rank"),
          InstanceAccessor<&Communicator::Size>("size"),
          InstanceAccessor<&Communicator::WorldRanks>("worldRanks"),
          InstanceMethod<&Communicator::Allreduce>("allreduce"),
          InstanceMethod<&Communicator::Bcast>("bcast"),
          InstanceMethod<&Communicator::Barrier>("barrier"),
          InstanceMethod<&Communicator::Allgather>("allgather"),
          InstanceMethod<&Communicator::Allgatherv>("allgatherv"),
          InstanceMethod<&Communicator::Alltoallv>("alltoallv"),
          InstanceMethod<&Communicator::Revoke>("revoke"),
          InstanceMethod<&Communicator::IsRevoked>("isRevoked"),
          InstanceMethod<&Communicator::Shrink>("shrink"),
          InstanceMethod<&Communicator::Split>("split"),
          InstanceMethod<&Communicator::Spawn>("spawn"),
          InstanceMethod<&Communicator::SpawnedUp>("spawnedUp"),
          InstanceMethod<&Communicator::Accept>("accept"),
          InstanceMethod<&Communicator::SpawnedReady>("spawnedReady"),
          InstanceMethod<&Communicator::Merge>("merge"),
          InstanceMethod<&Communicator::Agree>("agree"),
          InstanceMethod<&Communicator::GetFailed>("getFailed"),
          InstanceMethod<&Communicator::Free>("free"),
      });
  Constructor() = Napi::Persistent(ctor);
  exports.Set("Communicator", ctor);
}

Napi::Object Communicator::New(Napi::Env env, const CommInfo& info) {
  Napi::Object object =
      Constructor().New({Napi::External<char>::New(env, &kToken)});
  Unwrap(object)->info_ = info;
  return object;
}

Communicator::Communicator(const Napi::CallbackInfo& info) : Napi::ObjectWrap<Communicator>(info) {
  if (info.Length() != 1 || !info[0].IsExternal() ||
      info[0].As<Napi::External<char>>().Data() != &kToken) {
    throw Napi::TypeError::New(info.Env(),
                               "Communicator: not constructible; use init(), shrink(), split() or accept()");
  }
}

MPI_Comm Communicator::Handle(Napi::Env env, const char* method) const {
  if (freed_) throw Napi::Error::New(env, std::string(method) + ": the communicator was freed");
  if (!CommThread::Get().accepting()) {
    throw Napi::Error::New(env, std::string(method) + ": MPI has been finalized");
  }
  return info_.comm;
}

Napi::Value Communicator::Rank(const Napi::CallbackInfo& info) {
  return Napi::Number::New(info.Env(), info_.rank);
}

Napi::Value Communicator::Size(const Napi::CallbackInfo& info) {
  return Napi::Number::New(info.Env(), info_.size);
}

Napi::Value Communicator::WorldRanks(const Napi::CallbackInfo& info) {
  return ToArray(info.Env(), info_.worldRanks);
}

// allreduce(buffer, op = 'sum'): in place.
Napi::Value Communicator::Allreduce(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  MPI_Comm comm = Handle(env, "allreduce");
  Buffer buf = BufferArg(info, 0, "allreduce", "buffer");
  MPI_Op op = ReduceOpArg(info, 1, "allreduce");
  return CommThread::Get().Submit(
      env, {buf.value},
      [comm, buf, op] {
        const size_t bytes = BytesOf(buf);
        ChooseIallreduceAlgorithm(bytes);
        MPI_Request request;
        MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, buf.data, buf.count, buf.type, op, comm, &request));
        CommThread::Get().Wait(&request, comm, "MPI_Iallreduce", bytes);
        return Unit{};
      },
      Undefined);
}

// bcast(buffer, root): in place.
Napi::Value Communicator::Bcast(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  MPI_Comm comm = Handle(env, "bcast");
  Buffer buf = BufferArg(info, 0, "bcast", "buffer");
  int root = IntArg(info, 1, "bcast", "root", 0, info_.size - 1);
  return CommThread::Get().Submit(
      env, {buf.value},
      [comm, buf, root] {
        MPI_Request request;
        MPI_CHECK(MPI_Ibcast(buf.data, buf.count, buf.type, root, comm, &request));
        CommThread::Get().Wait(&request, comm, "MPI_Ibcast", BytesOf(buf));
        return Unit{};
      },
      Undefined);
}

Napi::Value Communicator::Barrier(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  MPI_Comm comm = Handle(env, "barrier");
  return CommThread::Get().Submit(
      env, {},
      [comm] {
        MPI_Request request;
        MPI_CHECK(MPI_Ibarrier(comm, &request));
        CommThread::Get().Wait(&request, comm, "MPI_Ibarrier");
        return Unit{};
      },
      Undefined);
}

// allgather(sendbuf, recvbuf): recvbuf holds size * sendbuf.length elements, rank order.
Napi::Value Communicator::Allgather(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  MPI_Comm comm = Handle(env, "allgather");
  Buffer send = BufferArg(info, 0, "allgather", "sendbuf");
  Buffer recv = BufferArg(info, 1, "allgather", "recvbuf");
  RequireSameType(env, "allgather", send, recv);
  if (static_cast<long long>(send.count) * info_.size != recv.count) {
    throw Napi::RangeError::New(env, "allgather: recvbuf has " + std::to_string(recv.count) +
                                         " elements; expected size * sendbuf.length = " +
                                         std::to_string(static_cast<long long>(send.count) * info_.size));
  }
  return CommThread::Get().Submit(
      env, {send.value, recv.value},
      [comm, send, recv] {
        MPI_Request request;
        MPI_CHECK(MPI_Iallgather(send.data, send.count, send.type, recv.data, send.count,
                                 recv.type, comm, &request));
        CommThread::Get().Wait(&request, comm, "MPI_Iallgather", BytesOf(recv));
        return Unit{};
      },
      Undefined);
}

// allgatherv(sendbuf, recvbuf, counts): rank r contributes counts[r] elements, packed in rank order.
Napi::Value Communicator::Allgatherv(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  MPI_Comm comm = Handle(env, "allgatherv");
  Buffer send = BufferArg(info, 0, "allgatherv", "sendbuf");
  Buffer recv = BufferArg(info, 1, "allgatherv", "recvbuf");
  RequireSameType(env, "allgatherv", send, recv);
  std::vector<int> counts = CountsArg(info, 2, "allgatherv", "counts", info_.size);
  if (counts[info_.rank] != send.count) {
    throw Napi::RangeError::New(env, "allgatherv: sendbuf has " + std::to_string(send.count) +
                                         " elements but counts[" + std::to_string(info_.rank) +
                                         "] is " + std::to_string(counts[info_.rank]));
  }
  std::vector<int> displs = Displacements(env, counts, recv.count, "allgatherv", "counts", "recvbuf");
  return CommThread::Get().Submit(
      env, {send.value, recv.value},
      [comm, send, recv, counts = std::move(counts), displs = std::move(displs)] {
        MPI_Request request;
        MPI_CHECK(MPI_Iallgatherv(send.data, send.count, send.type, recv.data, counts.data(),
                                  displs.data(), recv.type, comm, &request));
        CommThread::Get().Wait(&request, comm, "MPI_Iallgatherv", BytesOf(recv));
        return Unit{};
      },
      Undefined);
}

// alltoallv(sendbuf, sendCounts, recvbuf, recvCounts[, sendDispls, recvDispls]): blocks packed in
// rank order on both sides, or where the displacements (element offsets) put them: send blocks
// may overlap (one fragment to several ranks, no copies), receive blocks may not.
Napi::Value Communicator::Alltoallv(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  MPI_Comm comm = Handle(env, "alltoallv");
  Buffer send = BufferArg(info, 0, "alltoallv", "sendbuf");
  std::vector<int> sendCounts = CountsArg(info, 1, "alltoallv", "sendCounts", info_.size);
  Buffer recv = BufferArg(info, 2, "alltoallv", "recvbuf");
  std::vector<int> recvCounts = CountsArg(info, 3, "alltoallv", "recvCounts", info_.size);
  RequireSameType(env, "alltoallv", send, recv);
  bool placed = info.Length() > 4 && !(info[4].IsUndefined() && info[5].IsUndefined());
  std::vector<int> sendDispls, recvDispls;
  if (placed) {
    sendDispls = CountsArg(info, 4, "alltoallv", "sendDispls", info_.size);
    recvDispls = CountsArg(info, 5, "alltoallv", "recvDispls", info_.size);
    CheckDisplacements(env, sendCounts, sendDispls, send.count, false, "alltoallv", "sendDispls", "sendbuf");
    CheckDisplacements(env, recvCounts, recvDispls, recv.count, true, "alltoallv", "recvDispls", "recvbuf");
  } else {
    sendDispls = Displacements(env, sendCounts, send.count, "alltoallv", "sendCounts", "sendbuf");
    recvDispls = Displacements(env, recvCounts, recv.count, "alltoallv", "recvCounts", "recvbuf");
  }
  return CommThread::Get().Submit(
      env, {send.value, recv.value},
      [comm, send, recv, sendCounts = std::move(sendCounts), recvCounts = std::move(recvCounts),
       sendDispls = std::move(sendDispls), recvDispls = std::move(recvDispls)] {
        MPI_Request request;
        MPI_CHECK(MPI_Ialltoallv(send.data, sendCounts.data(), sendDispls.data(), send.type,
                                 recv.data, recvCounts.data(), recvDispls.data(), recv.type, comm,
                                 &request));
        CommThread::Get().Wait(&request, comm, "MPI_Ialltoallv", BytesOf(recv));
        return Unit{};
      },
      Undefined);
}

Napi::Value Communicator::Revoke(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  MPI_Comm comm = Handle(env, "revoke");
  // Urgent: it runs even while this communicator's collective is stuck in Wait.
  return CommThread::Get().SubmitUrgent(
      env,
      [comm] {
#ifdef FT_HAVE_MPIX_COMM_REVOKE
        MPI_CHECK(MPIX_Comm_revoke(comm));
#else
        (void)comm;
        NOT_SUPPORTED("MPIX_Comm_revoke");
#endif
        return Unit{};
      },
      Undefined);
}

Napi::Value Communicator::IsRevoked(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  MPI_Comm comm = Handle(env, "isRevoked");
  return CommThread::Get().Submit(
      env, {},
      [comm] {
        int flag = 0;
#ifdef FT_HAVE_MPIX_COMM_IS_REVOKED
        MPI_CHECK(MPIX_Comm_is_revoked(comm, &flag));
#else
        (void)comm;
        NOT_SUPPORTED("MPIX_Comm_is_revoked");
#endif
        return flag != 0;
      },
      [](Napi::Env env, bool& revoked) { return Napi::Boolean::New(env, revoked); });
}

// shrink(): a new Communicator of the survivors (collective over them).
Napi::Value Communicator::Shrink(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  MPI_Comm comm = Handle(env, "shrink");
  return CommThread::Get().Submit(
      env, {},
      [comm, ids = info_.worldRanks] {
#ifdef FT_HAVE_MPIX_COMM_SHRINK
        MPI_Comm shrunk;
        MPI_CHECK(MPIX_Comm_shrink(comm, &shrunk));
        return Describe(shrunk, IdsWithin(shrunk, comm, ids));
#else
        (void)comm;
        NOT_SUPPORTED("MPIX_Comm_shrink");
        return CommInfo{};
#endif
      },
      [](Napi::Env env, CommInfo& shrunk) { return New(env, shrunk); });
}

// agree(flag): the bitwise AND of every live rank's flag, the same on all of them, as a
// non-blocking MPIX_Comm_iagree polled like the collectives. When it reports a failure the flag
// is not used (MPI does not define it then); the error itself is uniform over the survivors.
Napi::Value Communicator::Agree(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  MPI_Comm comm = Handle(env, "agree");
  int flag = IntArg(info, 0, "agree", "flag", INT32_MIN, INT32_MAX);
  return CommThread::Get().Submit(
      env, {},
      [comm, flag]() mutable {
#ifdef FT_HAVE_MPIX_COMM_IAGREE
        MPI_Request request;
        MPI_CHECK(MPIX_Comm_iagree(comm, &flag, &request));
        CommThread::Get().Wait(&request, comm, "MPIX_Comm_iagree");
#else
        (void)comm;
        NOT_SUPPORTED("MPIX_Comm_iagree");
#endif
        return flag;
      },
      [](Napi::Env env, int& agreed) { return Napi::Number::New(env, agreed); });
}

// getFailed(): the ids of this communicator's processes known to have failed.
Napi::Value Communicator::GetFailed(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  MPI_Comm comm = Handle(env, "getFailed");
  return CommThread::Get().Submit(
      env, {},
      [comm, ids = info_.worldRanks] {
#ifdef FT_HAVE_MPIX_COMM_GET_FAILED
        MPI_Group failed;
        MPI_CHECK(MPIX_Comm_get_failed(comm, &failed));
        std::vector<int> ranks = IdsOf(failed, comm, ids);
        MPI_CHECK(MPI_Group_free(&failed));
        return ranks;
#else
        (void)comm;
        NOT_SUPPORTED("MPIX_Comm_get_failed");
        return std::vector<int>{};
#endif
      },
      [](Napi::Env env, std::vector<int>& ranks) { return ToArray(env, ranks); });
}

// split(color, key): MPI_Comm_split; the ranks passing the same color >= 0 get a communicator of
// their own, ordered by key, and a negative color gets null (MPI_UNDEFINED). Blocking in MPI (there
// is no non-blocking split): bound it from JS.
Napi::Value Communicator::Split(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  MPI_Comm comm = Handle(env, "split");
  int color = IntArg(info, 0, "split", "color", -1, INT32_MAX);
  int key = IntArg(info, 1, "split", "key", INT32_MIN, INT32_MAX);
  return CommThread::Get().Submit(
      env, {},
      [comm, color, key, ids = info_.worldRanks] {
        MPI_Comm part;
        MPI_CHECK(MPI_Comm_split(comm, color < 0 ? MPI_UNDEFINED : color, key, &part));
        if (part == MPI_COMM_NULL) return std::optional<CommInfo>();
        return std::optional<CommInfo>(Describe(part, IdsWithin(part, comm, ids)));
      },
      [](Napi::Env env, std::optional<CommInfo>& part) -> Napi::Value {
        if (!part) return env.Null();
        return New(env, *part);
      });
}

// spawn(command, args, count): on one rank, not collective: starts `count` processes running
// `command args` through PMIx_Spawn, the call MPI_Comm_spawn makes, and resolves with the port
// (MPI_Open_port) they connect to once their MPI runs (FT_JOIN_PORT in their environment: see
// init() in addon.cc), as soon as they are launched. MPI_Comm_spawn would also wait for their MPI
// to start (their program loading, 150-300 ms), holding every rank of `comm`. spawnedUp() says
// when they wait in MPI_Comm_connect, and accept() makes the intercommunicator with them.
Napi::Value Communicator::Spawn(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Handle(env, "spawn");
  if (!info[0].IsString()) ThrowArg(env, "spawn", "command", "a string", info[0]);
  std::string command = info[0].As<Napi::String>();
  std::vector<std::string> args = StringsArg(info, 1, "spawn", "args");
  int count = IntArg(info, 2, "spawn", "count", 1, 4096);
  return CommThread::Get().Submit(
      env, {},
      [command, args, count]() -> std::string {
#ifdef FT_HAVE_PMIX
        char port[MPI_MAX_PORT_NAME] = {0};
        MPI_CHECK(MPI_Open_port(MPI_INFO_NULL, port));
        pmix_app_t app;
        PMIX_APP_CONSTRUCT(&app);
        app.cmd = strdup(command.c_str());
        PMIx_Argv_append_nosize(&app.argv, command.c_str());
        for (const std::string& arg : args) PMIx_Argv_append_nosize(&app.argv, arg.c_str());
        PMIx_Argv_append_nosize(&app.env, (std::string(kJoinPortVariable) + "=" + port).c_str());
        app.maxprocs = count;
        char cwd[4096];
        if (getcwd(cwd, sizeof cwd) == nullptr) cwd[0] = '\0';
        PMIX_INFO_CREATE(app.info, 1);
        app.ninfo = 1;
        PMIX_INFO_LOAD(&app.info[0], PMIX_WDIR, cwd, PMIX_STRING);
        // as Open MPI's MPI_Comm_spawn says of the processes it starts: MPI programs
        pmix_info_t directives[3];
        PMIX_INFO_LOAD(&directives[0], PMIX_PERSONALITY, "ompi5", PMIX_STRING);
        // the runtime keeps a dead process's slot taken, so a job launched on all its slots had none
        // for the process that replaces it: placed on the first host with a free slot, else beside
        // the others, and unbound (bound, it would share with a live rank the core the runtime
        // still counts as the dead one's, while that core idles)
        PMIX_INFO_LOAD(&directives[1], PMIX_MAPBY, "slot:OVERSUBSCRIBE", PMIX_STRING);
        PMIX_INFO_LOAD(&directives[2], PMIX_BINDTO, "none", PMIX_STRING);
        char nspace[PMIX_MAX_NSLEN + 1] = {0};
        pmix_status_t status = PMIx_Spawn(directives, 3, &app, 1, nspace);
        for (pmix_info_t& directive : directives) PMIX_INFO_DESTRUCT(&directive);
        PMIX_APP_DESTRUCT(&app);
        if (status != PMIX_SUCCESS) {
          // MPI_Comm_spawn's error class, and PMIx's reason (no host can take it: PMIX_ERR_JOB_FAILED_TO_MAP)
          Failure failure = MpiFailure(MPI_ERR_SPAWN, "PMIx_Spawn", __FILE__, __LINE__);
          failure.message += std::string(": ") + PMIx_Error_string(status);
          throw OpException(failure);
        }
        return std::string(port);
#else
        (void)command;
        (void)args;
        (void)count;
        throw OpException(Failure{FailureKind::kNotSupported, 0, "spawn is not supported: this addon was built without PMIx"});
#endif
      },
      [](Napi::Env env, std::string& port) { return Napi::String::New(env, port); });
}

// spawnedUp(port, count): whether all `count` processes spawn() started for `port` have published
// that their MPI runs and they wait to connect (without waiting: one lookup each).
Napi::Value Communicator::SpawnedUp(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Handle(env, "spawnedUp");
  if (!info[0].IsString()) ThrowArg(env, "spawnedUp", "port", "a string", info[0]);
  std::string port = info[0].As<Napi::String>();
  int count = IntArg(info, 1, "spawnedUp", "count", 1, 4096);
  return CommThread::Get().Submit(
      env, {},
      [port, count] {
        // the name service is not MPI's progress: without a turn of it, a root polling here for
        // long sends no heartbeat, and the others take it for hung
        DriveProgress();
        for (int rank = 0; rank < count; ++rank) {
          char value[MPI_MAX_PORT_NAME] = {0};
          // MPI_ERR_NAME until it is published (MPI_COMM_WORLD's MPI_ERRORS_RETURN applies)
          if (MPI_Lookup_name(UpServiceName(port, rank).c_str(), MPI_INFO_NULL, value) != MPI_SUCCESS) return false;
        }
        return true;
      },
      [](Napi::Env env, bool& up) { return Napi::Boolean::New(env, up); });
}

// accept(port, count, firstId): collective; MPI_Comm_accept of the processes spawn() started for
// `port`, to be numbered firstId, firstId + 1, ... once merged: the intercommunicator with them,
// whose rank 0 has posted the receives of their "ready" (spawnedReady() polls them); merge() joins
// the two sides into one communicator. Blocking in MPI: bound it from JS.
Napi::Value Communicator::Accept(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  MPI_Comm comm = Handle(env, "accept");
  if (!info[0].IsString()) ThrowArg(env, "accept", "port", "a string", info[0]);
  std::string port = info[0].As<Napi::String>();
  int count = IntArg(info, 1, "accept", "count", 1, 4096);
  int firstId = IntArg(info, 2, "accept", "firstId", 0, INT32_MAX - 4096);
  return CommThread::Get().Submit(
      env, {},
      [comm, port, count, firstId, ids = info_.worldRanks, rank = info_.rank] {
        MPI_Comm children;
        MPI_CHECK(MPI_Comm_accept(port.c_str(), MPI_INFO_NULL, 0, comm, &children));
        if (rank == 0) MPI_Close_port(port.c_str());
        CommInfo spawned = Describe(children, ids);
        spawned.link = std::make_shared<SpawnLink>(SpawnLink{true, firstId, {}, {}});
        if (rank == 0) {
          SpawnLink& link = *spawned.link;
          link.ready.assign(count, 0);
          link.requests.assign(count, MPI_REQUEST_NULL);
          for (int child = 0; child < count; ++child) {
            MPI_CHECK(MPI_Irecv(&link.ready[child], 1, MPI_INT, child, kReadyTag, children,
                                &link.requests[child]));
          }
        }
        return spawned;
      },
      [](Napi::Env env, CommInfo& spawned) { return New(env, spawned); });
}

// spawnedReady(): on the spawning side's rank 0, whether every spawned process said it is ready
// (without waiting); a process that died before saying so fails it (ProcFailedError).
Napi::Value Communicator::SpawnedReady(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Handle(env, "spawnedReady");  // throws once freed or finalized
  if (!info_.link || !info_.link->spawning || info_.rank != 0) {
    throw Napi::Error::New(env, "spawnedReady: only on rank 0 of the side that spawned, before merge()");
  }
  return CommThread::Get().Submit(
      env, {},
      [link = info_.link] {
        bool all = true;
        for (MPI_Request& request : link->requests) {
          if (request == MPI_REQUEST_NULL) continue;
          int done = 0;
          MPI_CHECK(MPI_Test(&request, &done, MPI_STATUS_IGNORE));
          all = all && done != 0;
        }
        return all;
      },
      [](Napi::Env env, bool& ready) { return Napi::Boolean::New(env, ready); });
}

// merge(): collective over a spawn's intercommunicator, both sides. A spawned process says it is
// ready, then merges; the spawning side's rank 0 first waits for every "ready", and both sides
// agree that none of them failed before merging (both bounded like the collectives). One
// communicator results, the spawning ranks first with their ids, then the spawned ones numbered
// from spawn()'s firstId. The intercommunicator stays (free it). MPI_Intercomm_merge itself blocks:
// bound it from JS.
Napi::Value Communicator::Merge(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  MPI_Comm comm = Handle(env, "merge");
  if (!info_.link) throw Napi::Error::New(env, "merge: not the intercommunicator of a spawn");
  return CommThread::Get().Submit(
      env, {},
      [comm, link = info_.link, ids = info_.worldRanks, rank = info_.rank] {
        if (link->spawning) {
          for (MPI_Request& request : link->requests) {
            if (request != MPI_REQUEST_NULL) CommThread::Get().Wait(&request, comm, "MPI_Irecv");
          }
        } else {
          int ready = 1;
          MPI_CHECK(MPI_Send(&ready, 1, MPI_INT, 0, kReadyTag, comm));
        }
#ifdef FT_HAVE_MPIX_COMM_IAGREE
        // Both sides agree first, polled like the collectives: MPI_Intercomm_merge notices no
        // failure (a process dead or stopped on either side leaves the others in it for good, and
        // with them this thread), while an agreement reports it to every side alike.
        int alive = 1;
        MPI_Request request;
        MPI_CHECK(MPIX_Comm_iagree(comm, &alive, &request));
        CommThread::Get().Wait(&request, comm, "MPIX_Comm_iagree");
#endif
        MPI_Comm merged;
        MPI_CHECK(MPI_Intercomm_merge(comm, /*high=*/link->spawning ? 0 : 1, &merged));
        CommInfo info = Describe(merged, {});
        info.worldRanks = link->spawning ? MergedIds(merged, ids[rank], link->firstId) : MergedIds(merged, -1, -1);
        return info;
      },
      [](Napi::Env env, CommInfo& merged) { return New(env, merged); });
}

CommInfo ConnectToJob(const std::string& port, MPI_Comm comm) {
  int rank = 0;
  MPI_CHECK(MPI_Comm_rank(comm, &rank));
  std::string service = UpServiceName(port, rank);
  MPI_CHECK(MPI_Publish_name(service.c_str(), MPI_INFO_NULL, port.c_str()));
  MPI_Comm job;
  MPI_CHECK(MPI_Comm_connect(port.c_str(), MPI_INFO_NULL, 0, comm, &job));
  MPI_Unpublish_name(service.c_str(), MPI_INFO_NULL, port.c_str());
  CommInfo link = Describe(job, std::vector<int>(0));
  link.link = std::make_shared<SpawnLink>(SpawnLink{false, -1, {}, {}});
  return link;
}

Napi::Value Communicator::Free(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  MPI_Comm comm = Handle(env, "free");
  freed_ = true;
  return CommThread::Get().Submit(
      env, {},
      [comm, link = info_.link, noRequests = std::vector<MPI_Request>{}]() mutable {
        // a spawn given up before its merge: the receives of "ready" still posted go with it
        for (MPI_Request& request : link ? link->requests : noRequests) {
          if (request == MPI_REQUEST_NULL) continue;
          MPI_Cancel(&request);
          MPI_Request_free(&request);
        }
        MPI_CHECK(MPI_Comm_free(&comm));
        return Unit{};
      },
      Undefined);
}

}  // namespace ft
