// Reserves: the split that keeps them out of the job's world, their sleep until woken or dismissed
// (a receive from any process of the launch, polled between naps), and the messages that wake or
// dismiss them. A wake is the port to connect to and the arguments, NUL-separated; a dismissal is
// an empty message.
#include "mpi/reserves.h"

#include <mpi-ext.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "args.h"
#include "mpi/comm_thread.h"
#include "mpi/communicator.h"
#include "mpi/mpi_check.h"

namespace ft {

namespace {
// The tag of a wake or a dismissal (MPI_COMM_WORLD carries nothing else).
constexpr int kWakeTag = 0x5e4e;
// The longest wake: a port name and a command line.
constexpr int kMaxWakeBytes = 1 << 20;
// How long a reserve sleeps between two looks: a wake waits this long at most (a woken reserve
// joins at a step's end anyway), and each look drives MPI's progress (ULFM's heartbeats) for a few
// microseconds of a core the working ranks share.
constexpr auto kNap = std::chrono::milliseconds(10);
// How often, in looks, a reserve counts the processes before it that are gone.
constexpr int kLooksPerCount = 10;

enum class Outcome { kWoken, kDismissed, kAbandoned };

struct Wake {
  Outcome outcome = Outcome::kDismissed;
  std::string port;
  std::vector<std::string> args;
};

// Whether every process of MPI_COMM_WORLD before `me` is known to have failed: none is left to
// wake this reserve (a reserve is woken only by a working rank, and reserves in launch order).
bool AllBeforeGone(int me) {
#ifdef FT_HAVE_MPIX_COMM_GET_FAILED
  MPI_Group failed;
  MPI_CHECK(MPIX_Comm_get_failed(MPI_COMM_WORLD, &failed));
  std::vector<int> worldRanks = WorldRanksOf(failed);
  MPI_CHECK(MPI_Group_free(&failed));
  int before = 0;
  for (int rank : worldRanks) before += rank < me ? 1 : 0;
  return before == me;
#else
  (void)me;
  return false;
#endif
}

// Comm thread: sleeps until a wake or a dismissal comes, or no process is left to wake it.
Wake Sleep() {
  int me = 0;
  MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &me));
  std::vector<char> message(kMaxWakeBytes);
  MPI_Request request;
  MPI_CHECK(MPI_Irecv(message.data(), kMaxWakeBytes, MPI_CHAR, MPI_ANY_SOURCE, kWakeTag, MPI_COMM_WORLD, &request));
  MPI_Status status;
  for (int look = 1;; ++look) {
    int done = 0;
    if (MPI_Test(&request, &done, &status) != MPI_SUCCESS) {
      // a process of the launch failed (MPIX_ERR_PROC_FAILED_PENDING): acknowledged, the receive
      // from any process goes on
#ifdef FT_HAVE_MPIX_COMM_ACK_FAILED
      int size = 0, acked = 0;
      MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &size));
      MPI_CHECK(MPIX_Comm_ack_failed(MPI_COMM_WORLD, size, &acked));
#endif
      done = 0;
    }
    if (done) break;
    if (look % kLooksPerCount == 0 && AllBeforeGone(me)) {
      MPI_Cancel(&request);
      MPI_Request_free(&request);
      return {Outcome::kAbandoned, {}, {}};
    }
    std::this_thread::sleep_for(kNap);
  }
  int count = 0;
  MPI_CHECK(MPI_Get_count(&status, MPI_CHAR, &count));
  if (count == 0) return {};
  std::vector<std::string> parts;
  std::string part;
  for (int i = 0; i < count; ++i) {
    if (message[i] != '\0') {
      part.push_back(message[i]);
      continue;
    }
    parts.push_back(part);
    part.clear();
  }
  parts.push_back(part);
  return {Outcome::kWoken, parts[0], std::vector<std::string>(parts.begin() + 1, parts.end())};
}

}  // namespace

bool SplitOffReserves(int reserves, MPI_Comm* world) {
  int rank = 0, size = 0;
  MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
  MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &size));
  const bool reserve = rank >= size - reserves;
  MPI_Comm part;
  MPI_CHECK(MPI_Comm_split(MPI_COMM_WORLD, reserve ? MPI_UNDEFINED : 0, rank, &part));
  if (!reserve) *world = part;
  return reserve;
}

Napi::Value AwaitWake(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return CommThread::Get().Submit(env, {}, Sleep, [](Napi::Env env, Wake& wake) -> Napi::Value {
    if (wake.outcome == Outcome::kDismissed) return Napi::String::New(env, "dismissed");
    if (wake.outcome == Outcome::kAbandoned) return Napi::String::New(env, "abandoned");
    Napi::Object result = Napi::Object::New(env);
    result.Set("port", wake.port);
    Napi::Array args = Napi::Array::New(env, wake.args.size());
    for (uint32_t i = 0; i < wake.args.size(); ++i) args.Set(i, wake.args[i]);
    result.Set("args", args);
    return result;
  });
}

Napi::Value ConnectWoken(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!info[0].IsString()) ThrowArg(env, "connectWoken", "port", "a string", info[0]);
  std::string port = info[0].As<Napi::String>();
  return CommThread::Get().Submit(
      env, {}, [port] { return ConnectToJob(port, MPI_COMM_SELF); },
      [](Napi::Env env, CommInfo& link) { return Communicator::New(env, link); });
}

Napi::Value WakeReserve(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  int worldRank = IntArg(info, 0, "wakeReserve", "worldRank", 0, INT32_MAX);
  std::vector<std::string> args = StringsArg(info, 1, "wakeReserve", "args");
  return CommThread::Get().Submit(
      env, {},
      [worldRank, args] {
        char port[MPI_MAX_PORT_NAME] = {0};
        MPI_CHECK(MPI_Open_port(MPI_INFO_NULL, port));
        std::string message(port);
        for (const std::string& arg : args) message += std::string(1, '\0') + arg;
        if (message.size() > static_cast<size_t>(kMaxWakeBytes)) {
          MPI_Close_port(port);
          throw OpException(Failure{FailureKind::kUsage, 0, "wakeReserve: the arguments exceed 1 MiB"});
        }
        // small enough to go eagerly: returns at once. A reserve that died asleep never connects,
        // which the waking ranks find as they find a spawned process lost before its MPI ran.
        MPI_Send(message.data(), static_cast<int>(message.size()), MPI_CHAR, worldRank, kWakeTag, MPI_COMM_WORLD);
        return std::string(port);
      },
      [](Napi::Env env, std::string& port) { return Napi::String::New(env, port); });
}

Napi::Value DismissReserves(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!info[0].IsArray()) ThrowArg(env, "dismissReserves", "worldRanks", "an Array of numbers", info[0]);
  Napi::Array list = info[0].As<Napi::Array>();
  std::vector<int> ranks;
  for (uint32_t i = 0; i < list.Length(); ++i) {
    Napi::Value rank = list.Get(i);
    if (!rank.IsNumber()) ThrowArg(env, "dismissReserves", "worldRanks", "an Array of numbers", rank);
    ranks.push_back(rank.As<Napi::Number>().Int32Value());
  }
  return CommThread::Get().Submit(
      env, {},
      [ranks] {
        int me = 0;
        MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &me));
        char none = 0;
        // empty messages go eagerly; one to a process gone fails, and is passed over
        for (int rank : ranks) {
          if (rank != me) MPI_Send(&none, 0, MPI_CHAR, rank, kWakeTag, MPI_COMM_WORLD);
        }
        return Unit{};
      },
      [](Napi::Env env, Unit&) { return env.Undefined(); });
}

}  // namespace ft
