// The Communicator's methods: collectives and the ULFM calls (revoke, shrink, agree, getFailed).
#include "communicator.h"

#include <mpi-ext.h>

#include "args.h"
#include "comm_thread.h"

namespace ft {

namespace {
Napi::FunctionReference& Constructor() {
  static Napi::FunctionReference* ctor = new Napi::FunctionReference();
  return *ctor;
}

// Marks the external handed to the constructor by New(), so JS cannot construct one itself.
char kToken = 0;

Napi::Value Undefined(Napi::Env env, Unit&) { return env.Undefined(); }

std::vector<int> ToWorldRanks(MPI_Group group) {
  MPI_Group world;
  MPI_CHECK(MPI_Comm_group(MPI_COMM_WORLD, &world));
  int size = 0;
  MPI_CHECK(MPI_Group_size(group, &size));
  std::vector<int> ranks(size), worldRanks(size);
  for (int i = 0; i < size; ++i) ranks[i] = i;
  MPI_CHECK(MPI_Group_translate_ranks(group, size, ranks.data(), world, worldRanks.data()));
  MPI_CHECK(MPI_Group_free(&world));
  return worldRanks;
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

CommInfo Describe(MPI_Comm comm) {
  MPI_CHECK(MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN));
  CommInfo info{comm, 0, 0, {}};
  MPI_CHECK(MPI_Comm_rank(comm, &info.rank));
  MPI_CHECK(MPI_Comm_size(comm, &info.size));
  MPI_Group group;
  MPI_CHECK(MPI_Comm_group(comm, &group));
  info.worldRanks = ToWorldRanks(group);
  MPI_CHECK(MPI_Group_free(&group));
  return info;
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
                               "Communicator: not constructible; use init() or shrink()");
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
        MPI_Request request;
        MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, buf.data, buf.count, buf.type, op, comm, &request));
        CommThread::Get().Wait(&request, comm, "MPI_Iallreduce");
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
        CommThread::Get().Wait(&request, comm, "MPI_Ibcast");
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
        CommThread::Get().Wait(&request, comm, "MPI_Iallgather");
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
        CommThread::Get().Wait(&request, comm, "MPI_Iallgatherv");
        return Unit{};
      },
      Undefined);
}

// alltoallv(sendbuf, sendCounts, recvbuf, recvCounts): blocks packed in rank order on both sides.
Napi::Value Communicator::Alltoallv(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  MPI_Comm comm = Handle(env, "alltoallv");
  Buffer send = BufferArg(info, 0, "alltoallv", "sendbuf");
  std::vector<int> sendCounts = CountsArg(info, 1, "alltoallv", "sendCounts", info_.size);
  Buffer recv = BufferArg(info, 2, "alltoallv", "recvbuf");
  std::vector<int> recvCounts = CountsArg(info, 3, "alltoallv", "recvCounts", info_.size);
  RequireSameType(env, "alltoallv", send, recv);
  std::vector<int> sendDispls =
      Displacements(env, sendCounts, send.count, "alltoallv", "sendCounts", "sendbuf");
  std::vector<int> recvDispls =
      Displacements(env, recvCounts, recv.count, "alltoallv", "recvCounts", "recvbuf");
  return CommThread::Get().Submit(
      env, {send.value, recv.value},
      [comm, send, recv, sendCounts = std::move(sendCounts), recvCounts = std::move(recvCounts),
       sendDispls = std::move(sendDispls), recvDispls = std::move(recvDispls)] {
        MPI_Request request;
        MPI_CHECK(MPI_Ialltoallv(send.data, sendCounts.data(), sendDispls.data(), send.type,
                                 recv.data, recvCounts.data(), recvDispls.data(), recv.type, comm,
                                 &request));
        CommThread::Get().Wait(&request, comm, "MPI_Ialltoallv");
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
      [comm] {
#ifdef FT_HAVE_MPIX_COMM_SHRINK
        MPI_Comm shrunk;
        MPI_CHECK(MPIX_Comm_shrink(comm, &shrunk));
        return Describe(shrunk);
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

// getFailed(): COMM_WORLD ranks of this communicator's processes known to have failed.
Napi::Value Communicator::GetFailed(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  MPI_Comm comm = Handle(env, "getFailed");
  return CommThread::Get().Submit(
      env, {},
      [comm] {
#ifdef FT_HAVE_MPIX_COMM_GET_FAILED
        MPI_Group failed;
        MPI_CHECK(MPIX_Comm_get_failed(comm, &failed));
        std::vector<int> ranks = ToWorldRanks(failed);
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

Napi::Value Communicator::Free(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  MPI_Comm comm = Handle(env, "free");
  freed_ = true;
  return CommThread::Get().Submit(
      env, {},
      [comm]() mutable {
        MPI_CHECK(MPI_Comm_free(&comm));
        return Unit{};
      },
      Undefined);
}

}  // namespace ft
