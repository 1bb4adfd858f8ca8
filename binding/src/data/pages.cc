// Memory a recovery will write, mapped beside training. On a VM whose host backs each page as it
// is first touched, a fresh 4 KiB page cost about 12 us to write (12 MB: 37 ms); written at a
// step's end on the JS thread, that held every rank up at the next collective. Here a pool thread
// asks the kernel to map the pages writable (MADV_POPULATE_WRITE) without writing them: their
// contents stay the zeros they were, so the JS thread may write the memory meanwhile, and a page
// it writes first is simply mapped then, as before.
#include "data/pages.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <string>

#include "args.h"

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23  // Linux 5.14; older C libraries lack the name
#endif

namespace ft {

namespace {
constexpr uintptr_t kPageBytes = 4096;
constexpr uintptr_t kHugePageBytes = uintptr_t{2} << 20;

// Maps `bytes` from `start` writable on libuv's pool, keeping the ArrayBuffer alive until it is done.
class PopulateWorker : public Napi::AsyncWorker {
 public:
  PopulateWorker(Napi::Env env, Napi::ArrayBuffer memory, uintptr_t start, size_t bytes)
      : Napi::AsyncWorker(env, "mapMemory"),
        deferred_(Napi::Promise::Deferred::New(env)),
        memory_(Napi::Persistent(memory)),
        start_(start),
        bytes_(bytes) {}

  Napi::Promise Promise() { return deferred_.Promise(); }

 protected:
  void Execute() override { mapped_ = madvise(reinterpret_cast<void*>(start_), bytes_, MADV_POPULATE_WRITE) == 0; }

  void OnOK() override { deferred_.Resolve(Napi::Boolean::New(Env(), mapped_)); }

 private:
  Napi::Promise::Deferred deferred_;
  Napi::Reference<Napi::ArrayBuffer> memory_;
  uintptr_t start_;
  size_t bytes_;
  bool mapped_ = false;
};

bool PopulateSupported() {
  static const bool supported = [] {
    void* page = mmap(nullptr, kPageBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (page == MAP_FAILED) return false;
    const bool ok = madvise(page, kPageBytes, MADV_POPULATE_WRITE) == 0;
    munmap(page, kPageBytes);
    return ok;
  }();
  return supported;
}
}  // namespace

bool AdviseHugePages(uintptr_t start, size_t bytes) {
  const uintptr_t from = (start + kHugePageBytes - 1) & ~(kHugePageBytes - 1);
  const uintptr_t to = (start + bytes) & ~(kHugePageBytes - 1);
  return to > from && madvise(reinterpret_cast<void*>(from), to - from, MADV_HUGEPAGE) == 0;
}

Napi::Value CanPopulate(const Napi::CallbackInfo& info) { return Napi::Boolean::New(info.Env(), PopulateSupported()); }

Napi::Value MapMemory(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const double asked = info[0].IsNumber() ? info[0].As<Napi::Number>().DoubleValue() : 0;
  if (!(asked >= 1 && asked <= 0x1p40 && asked == static_cast<double>(static_cast<int64_t>(asked))))
    ThrowArg(env, "mapMemory", "bytes", "an integer in [1, 2^40]", info[0]);
  const auto bytes = static_cast<int64_t>(asked);
  if (!info[1].IsBoolean()) ThrowArg(env, "mapMemory", "hugePages", "a boolean", info[1]);
  const bool hugePages = info[1].As<Napi::Boolean>().Value();
  const size_t length = static_cast<size_t>(bytes);
  const size_t mappedBytes = (length + kPageBytes - 1) & ~(kPageBytes - 1);
  void* data = mmap(nullptr, mappedBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (data == MAP_FAILED) throw Napi::Error::New(env, "mapMemory: mmap of " + std::to_string(mappedBytes) + " bytes failed");
  const auto start = reinterpret_cast<uintptr_t>(data);
  if (hugePages) AdviseHugePages(start, mappedBytes);
  Napi::MemoryManagement::AdjustExternalMemory(env, static_cast<int64_t>(mappedBytes));
  Napi::ArrayBuffer memory = Napi::ArrayBuffer::New(
      env, data, length, [mappedBytes](Napi::Env env, void* unmapped) {
        munmap(unmapped, mappedBytes);
        Napi::MemoryManagement::AdjustExternalMemory(env, -static_cast<int64_t>(mappedBytes));
      });
  Napi::Object result = Napi::Object::New(env);
  result.Set("memory", memory);
  if (PopulateSupported()) {
    auto* worker = new PopulateWorker(env, memory, start, mappedBytes);
    result.Set("mapped", worker->Promise());
    worker->Queue();
  } else {
    auto unmapped = Napi::Promise::Deferred::New(env);
    unmapped.Resolve(Napi::Boolean::New(env, false));
    result.Set("mapped", unmapped.Promise());
  }
  return result;
}

}  // namespace ft
