// Checkpoint stripes written at the disk's speed. A buffered write copies every byte into fresh
// page-cache pages first, and on a VM whose memory the host backs lazily those cost more than the
// disk itself (100 MB: about 300 ms of kernel time the first time, against about 50 ms for the
// disk), before the fsync writes them out. Here the byte ranges are first joined into runs of
// ranges that follow one another in the file (a stripe's pieces, one writer's stripes), so that
// only a run's ends can be unaligned. The page-aligned middle of each run goes through O_DIRECT,
// copied into a ring of aligned staging buffers (the caller's memory and offsets are not aligned
// alike); once there is more than one buffer's worth, a second thread writes the last while this
// one fills the next, so the copy hides behind the disk. The unaligned ends go through the page
// cache. A page is written by one path only, so a direct write never races another rank's buffered
// write of a page they share. Where the file system refuses O_DIRECT (tmpfs), every byte is
// buffered.
//
// new FileWriter() allocates and touches the ring; writer.write(path, fileBytes, [{at, bytes}])
// -> Promise: creates the file if needed, sets its length to fileBytes, writes each view's bytes
// at `at` (the views must not overlap in the file), and makes them durable (fdatasync);
// writer.fill(path, fileBytes) -> Promise: a new file of fileBytes with every block written and
// durable; writer.cancel() ends a fill under way after the piece being written (it rejects with
// ECANCELED), so that nobody waits at exit for a file no checkpoint will use. One write or fill at
// a time per writer.
//
// writeDurable(path, bytes) -> Promise: a small file (a checkpoint's manifest) created or
// replaced, written through the page cache and made durable, in one task on libuv's pool. Node's
// fs takes a task for the write and another for the fdatasync, and on a core shared with a rank
// that computes each hand-off between the pool and the JS thread waited for the core (lenet, 4
// ranks on 2 cores, a kill, 12 drills each: the JIT checkpoint took 7.3 ms, median, 3.9-19 ms, with
// Node's fs; 5.1 ms, 4.6-16.5, with one task).
//
// An I/O error rejects with an Error like Node's fs errors, naming the file: "<path>: ENOSPC: no
// space left on device", .code "ENOSPC".
#include "io/direct_write.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <uv.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "args.h"
#include "data/pages.h"

namespace ft {

namespace {
// O_DIRECT needs 512 here (statx's dio alignment); a page also keeps every page to one path.
constexpr size_t kPage = 4096;
// Two slots of 4 MiB: large enough that the device sees deep requests, small enough to touch at
// start-up.
constexpr size_t kSlotBytes = size_t{4} << 20;
constexpr size_t kHugePage = size_t{2} << 20;
constexpr int kSlots = 2;

struct IoError {
  int code;  // errno
  const char* syscall;
};

struct Range {
  uint64_t at;
  const uint8_t* data;
  size_t length;
};

// Ranges that follow one another in the file, [at, end), written as one.
struct Run {
  uint64_t at;
  uint64_t end;
  std::vector<Range> pieces;

  // The run's bytes [from, from + length) (file offsets within it) into `out`.
  void CopyOut(uint64_t from, size_t length, uint8_t* out) const {
    for (const Range& piece : pieces) {
      uint64_t pieceEnd = piece.at + piece.length;
      if (length == 0) return;
      if (pieceEnd <= from) continue;
      size_t n = static_cast<size_t>(std::min<uint64_t>(pieceEnd - from, length));
      std::memcpy(out, piece.data + (from - piece.at), n);
      out += n;
      from += n;
      length -= n;
    }
  }
};

uint64_t AlignUp(uint64_t x) { return (x + kPage - 1) / kPage * kPage; }
uint64_t AlignDown(uint64_t x) { return x / kPage * kPage; }

class Fd {
 public:
  Fd(const std::string& path, int flags) : fd_(open(path.c_str(), flags | O_CLOEXEC, 0644)) {}
  ~Fd() {
    if (fd_ >= 0) close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

void WriteAll(int fd, const uint8_t* data, size_t length, uint64_t at) {
  while (length > 0) {
    ssize_t written = pwrite(fd, data, length, static_cast<off_t>(at));
    if (written < 0 && errno == EINTR) continue;
    if (written < 0) throw IoError{errno, "write"};
    if (written == 0) throw IoError{ENOSPC, "write"};
    data += written;
    length -= static_cast<size_t>(written);
    at += static_cast<uint64_t>(written);
  }
}

// Aligned bytes through `direct`; what a short direct write leaves (no longer aligned) through
// `buffered`.
void WriteDirect(int direct, int buffered, const uint8_t* data, size_t length, uint64_t at) {
  ssize_t written;
  do written = pwrite(direct, data, length, static_cast<off_t>(at));
  while (written < 0 && errno == EINTR);
  if (written < 0) throw IoError{errno, "write"};
  size_t done = static_cast<size_t>(written);
  WriteAll(buffered, data + done, length - done, at + done);
}

// The staging slots, allocated once and touched at once: at checkpoint time fresh pages cost. In
// huge pages where the kernel gives them (asked before the first write): on a VM whose host backs
// each first-touched page lazily, making a writer took 0.6 ms so, against 26 in 4 KiB pages.
class Ring {
 public:
  Ring() : memory_(static_cast<uint8_t*>(std::aligned_alloc(kHugePage, kSlots * kSlotBytes)), std::free) {
    if (!memory_) throw std::bad_alloc();
    AdviseHugePages(reinterpret_cast<uintptr_t>(memory_.get()), kSlots * kSlotBytes);  // best effort: 4 KiB pages otherwise
    for (size_t i = 0; i < kSlots * kSlotBytes; i += kPage) static_cast<volatile uint8_t*>(memory_.get())[i] = 0;
  }
  uint8_t* Slot(int i) { return memory_.get() + i * kSlotBytes; }

 private:
  std::unique_ptr<uint8_t, decltype(&std::free)> memory_;
};

// Aligned bytes copied into the slots in turn by the caller. The first slot filled is held: if the
// copy ends there the caller writes it itself (handing it to a thread would cost a wake-up, about
// half a millisecond on a busy host, for nothing to overlap). A second slot starts a thread of its
// own that writes the filled slots in turn while the caller copies the next.
class Pipeline {
 public:
  Pipeline(Ring& ring, int direct, int buffered) : ring_(ring), direct_(direct), buffered_(buffered) {}
  ~Pipeline() { Stop(); }

  // The run's bytes [from, to), multiples of kPage.
  void Copy(const Run& run, uint64_t from, uint64_t to) {
    for (uint64_t at = from; at < to; at += kSlotBytes) {
      if (Held()) writer_ = std::thread([this] { WriteFilled(); });
      Slot& slot = slots_[next_];
      {
        std::unique_lock<std::mutex> lock(mutex_);
        changed_.wait(lock, [&] { return !slot.filled || failed_; });
        if (failed_) return;
      }
      slot.length = static_cast<size_t>(std::min<uint64_t>(kSlotBytes, to - at));
      slot.at = at;
      run.CopyOut(at, slot.length, ring_.Slot(next_));
      {
        std::lock_guard<std::mutex> lock(mutex_);
        slot.filled = true;
      }
      changed_.notify_all();
      next_ = (next_ + 1) % kSlots;
    }
  }

  // Waits for the writes; throws the first error.
  void Finish() {
    if (Held()) {
      WriteDirect(direct_, buffered_, ring_.Slot(0), slots_[0].length, slots_[0].at);
      return;
    }
    Stop();
    if (failed_) throw error_;
  }

 private:
  struct Slot {
    uint64_t at = 0;
    size_t length = 0;
    bool filled = false;
  };

  // The first slot is filled and no thread writes it yet.
  bool Held() const { return !writer_.joinable() && slots_[0].filled; }

  void Stop() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      closing_ = true;
    }
    changed_.notify_all();
    if (writer_.joinable()) writer_.join();
  }

  void WriteFilled() {
    for (int turn = 0;; turn = (turn + 1) % kSlots) {
      Slot& slot = slots_[turn];
      {
        std::unique_lock<std::mutex> lock(mutex_);
        changed_.wait(lock, [&] { return slot.filled || closing_; });
        if (!slot.filled) return;  // closing, and everything copied is written
      }
      try {
        WriteDirect(direct_, buffered_, ring_.Slot(turn), slot.length, slot.at);
      } catch (const IoError& error) {
        std::lock_guard<std::mutex> lock(mutex_);
        error_ = error;
        failed_ = true;
        changed_.notify_all();
        return;
      }
      {
        std::lock_guard<std::mutex> lock(mutex_);
        slot.filled = false;
      }
      changed_.notify_all();
    }
  }

  Ring& ring_;
  const int direct_;
  const int buffered_;
  Slot slots_[kSlots];
  int next_ = 0;
  std::mutex mutex_;
  std::condition_variable changed_;
  bool closing_ = false;
  bool failed_ = false;
  IoError error_{0, ""};
  std::thread writer_;
};

// The file's length made fileBytes, unless it is already: a truncate to the same length still
// changes the inode, which the fdatasync would then commit to the journal.
void SetLength(int fd, uint64_t fileBytes) {
  struct stat status;
  if (fstat(fd, &status) != 0) throw IoError{errno, "fstat"};
  if (static_cast<uint64_t>(status.st_size) == fileBytes) return;
  if (ftruncate(fd, static_cast<off_t>(fileBytes)) != 0) throw IoError{errno, "ftruncate"};
}

// Bytes [from, to) of the run through the page cache, at most a page of them.
void WriteBuffered(int buffered, const Run& run, uint64_t from, uint64_t to) {
  uint8_t page[kPage];
  run.CopyOut(from, static_cast<size_t>(to - from), page);
  WriteAll(buffered, page, static_cast<size_t>(to - from), from);
}

void WriteFile(Ring& ring, const std::string& path, uint64_t fileBytes, const std::vector<Run>& runs) {
  Fd buffered(path, O_WRONLY | O_CREAT);
  if (buffered.get() < 0) throw IoError{errno, "open"};
  // every writer sets the final length (see writeStripes in src/checkpoint/checkpoint.ts)
  SetLength(buffered.get(), fileBytes);
  Fd direct(path, O_WRONLY | O_DIRECT);
  if (direct.get() < 0 && errno != EINVAL) throw IoError{errno, "open"};
  {
    Pipeline pipeline(ring, direct.get(), buffered.get());
    for (const Run& run : runs) {
      if (direct.get() < 0) {
        for (const Range& piece : run.pieces) WriteAll(buffered.get(), piece.data, piece.length, piece.at);
        continue;
      }
      uint64_t from = std::min(AlignUp(run.at), run.end);
      uint64_t to = std::max(from, AlignDown(run.end));
      WriteBuffered(buffered.get(), run, run.at, from);
      pipeline.Copy(run, from, to);
      WriteBuffered(buffered.get(), run, to, run.end);
    }
    pipeline.Finish();
  }
  // the data and what reading it back needs (length, blocks); over blocks already written (a
  // spare file, see src/checkpoint/checkpoint.ts) that is the data alone, no journal commit
  if (fdatasync(buffered.get()) != 0) throw IoError{errno, "fdatasync"};
}

// A fill's pieces: small enough that a cancel ends it soon on a slow disk.
constexpr size_t kFillPieceBytes = size_t{1} << 20;

// A new file of fileBytes whose every block is written (with whatever the ring holds) and durable:
// later writes over it allocate nothing. Checks `cancelled` before each piece.
void FillFile(Ring& ring, const std::string& path, uint64_t fileBytes, const std::atomic<bool>& cancelled) {
  Fd buffered(path, O_WRONLY | O_CREAT | O_TRUNC);
  if (buffered.get() < 0) throw IoError{errno, "open"};
  Fd direct(path, O_WRONLY | O_DIRECT);
  if (direct.get() < 0 && errno != EINVAL) throw IoError{errno, "open"};
  uint64_t aligned = direct.get() < 0 ? 0 : AlignDown(fileBytes);
  for (uint64_t at = 0; at < fileBytes; at += kFillPieceBytes) {
    if (cancelled.load()) throw IoError{ECANCELED, "write"};
    uint64_t end = std::min<uint64_t>(at + kFillPieceBytes, fileBytes);
    // a piece is direct up to `aligned` and buffered past it (pieces and `aligned` are page multiples)
    uint64_t directEnd = std::min(end, std::max(at, aligned));
    if (directEnd > at) WriteDirect(direct.get(), buffered.get(), ring.Slot(0), directEnd - at, at);
    if (end > directEnd) WriteAll(buffered.get(), ring.Slot(0), end - directEnd, directEnd);
  }
  if (fdatasync(buffered.get()) != 0) throw IoError{errno, "fdatasync"};
}

// An I/O error as Node's fs reports one, naming the file.
Napi::Value ErrorValue(Napi::Env env, const std::string& path, const IoError& failure) {
  const char* code = uv_err_name(-failure.code);
  Napi::Error error = Napi::Error::New(env, path + ": " + code + ": " + uv_strerror(-failure.code));
  error.Set("code", Napi::String::New(env, code));
  error.Set("syscall", Napi::String::New(env, failure.syscall));
  error.Set("path", Napi::String::New(env, path));
  return error.Value();
}

class FileWriteWorker : public Napi::AsyncWorker {
 public:
  // fill: FillFile instead of WriteFile (runs empty)
  FileWriteWorker(Napi::Env env, Ring& ring, bool& busy, const std::atomic<bool>& cancelled, std::string path, uint64_t fileBytes,
                  bool fill, std::vector<Run> runs, Napi::Object writer, Napi::Object views)
      : Napi::AsyncWorker(env, "FileWriter.write"), deferred_(Napi::Promise::Deferred::New(env)), ring_(ring),
        busy_(busy), cancelled_(cancelled), path_(std::move(path)), fileBytes_(fileBytes), fill_(fill), runs_(std::move(runs)),
        writer_(Napi::Persistent(writer)), views_(Napi::Persistent(views)) {}

  Napi::Promise Promise() { return deferred_.Promise(); }

 protected:
  void Execute() override {
    try {
      if (fill_) FillFile(ring_, path_, fileBytes_, cancelled_);
      else WriteFile(ring_, path_, fileBytes_, runs_);
    } catch (const IoError& error) {
      error_ = error;
    } catch (const std::system_error& error) {
      // the writer thread could not start (EAGAIN): rejected like an I/O error, never left pending
      error_ = IoError{error.code().value(), "pthread_create"};
    }
  }

  void OnOK() override {
    busy_ = false;
    if (error_.code == 0) {
      deferred_.Resolve(Env().Undefined());
      return;
    }
    deferred_.Reject(ErrorValue(Env(), path_, error_));
  }

 private:
  Napi::Promise::Deferred deferred_;
  Ring& ring_;
  bool& busy_;
  const std::atomic<bool>& cancelled_;
  std::string path_;
  uint64_t fileBytes_;
  bool fill_;
  std::vector<Run> runs_;
  // the ring and the views' memory stay alive until the write ends
  Napi::ObjectReference writer_;
  Napi::ObjectReference views_;
  IoError error_{0, ""};
};

// writeDurable's task: the bytes are its own copy, so the caller's buffer is free at once.
class DurableWriteWorker : public Napi::AsyncWorker {
 public:
  DurableWriteWorker(Napi::Env env, std::string path, std::vector<uint8_t> bytes)
      : Napi::AsyncWorker(env, "writeDurable"), deferred_(Napi::Promise::Deferred::New(env)), path_(std::move(path)),
        bytes_(std::move(bytes)) {}

  Napi::Promise Promise() { return deferred_.Promise(); }

 protected:
  void Execute() override {
    try {
      Fd file(path_, O_WRONLY | O_CREAT | O_TRUNC);
      if (file.get() < 0) throw IoError{errno, "open"};
      WriteAll(file.get(), bytes_.data(), bytes_.size(), 0);
      if (fdatasync(file.get()) != 0) throw IoError{errno, "fdatasync"};
    } catch (const IoError& error) {
      error_ = error;
    }
  }

  void OnOK() override {
    if (error_.code == 0) deferred_.Resolve(Env().Undefined());
    else deferred_.Reject(ErrorValue(Env(), path_, error_));
  }

 private:
  Napi::Promise::Deferred deferred_;
  std::string path_;
  std::vector<uint8_t> bytes_;
  IoError error_{0, ""};
};

Napi::Value WriteDurable(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const char* method = "writeDurable";
  if (!info[0].IsString()) ThrowArg(env, method, "path", "a string", info[0]);
  if (!info[1].IsTypedArray()) ThrowArg(env, method, "bytes", "a typed array", info[1]);
  auto view = info[1].As<Napi::TypedArray>();
  const uint8_t* data = DataOf(view);
  auto* worker = new DurableWriteWorker(env, info[0].As<Napi::String>().Utf8Value(), std::vector<uint8_t>(data, data + view.ByteLength()));
  worker->Queue();
  return worker->Promise();
}

class FileWriter : public Napi::ObjectWrap<FileWriter> {
 public:
  explicit FileWriter(const Napi::CallbackInfo& info) : Napi::ObjectWrap<FileWriter>(info) {}

  Napi::Value Write(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    const char* method = "FileWriter.write";
    uint64_t fileBytes = FileBytes(info, method);
    if (!info[2].IsArray()) ThrowArg(env, method, "parts", "an Array of {at, bytes}", info[2]);
    auto parts = info[2].As<Napi::Array>();
    std::vector<std::pair<Range, uint32_t>> ranges;  // and the part's index
    // the views themselves, kept alive until the write ends whatever the caller does to `parts`
    Napi::Array views = Napi::Array::New(env, parts.Length());
    for (uint32_t i = 0; i < parts.Length(); ++i) {
      Napi::Value part = parts.Get(i);
      std::string name = "parts[" + std::to_string(i) + "]";
      if (!part.IsObject()) ThrowArg(env, method, name.c_str(), "{at, bytes}", part);
      Napi::Value at = part.As<Napi::Object>().Get("at");
      Napi::Value bytes = part.As<Napi::Object>().Get("bytes");
      double offset = at.IsNumber() ? at.As<Napi::Number>().DoubleValue() : -1;
      if (!bytes.IsTypedArray()) ThrowArg(env, method, (name + ".bytes").c_str(), "a typed array", bytes);
      auto view = bytes.As<Napi::TypedArray>();
      if (offset < 0 || offset != static_cast<double>(static_cast<uint64_t>(offset)) || offset + view.ByteLength() > static_cast<double>(fileBytes)) {
        ThrowArg(env, method, (name + ".at").c_str(), "an offset within fileBytes of the whole view", at);
      }
      views.Set(i, view);
      if (view.ByteLength() > 0) ranges.push_back({{static_cast<uint64_t>(offset), DataOf(view), view.ByteLength()}, i});
    }
    // by offset, then by index, so that of two parts at one offset the later one is named
    std::sort(ranges.begin(), ranges.end(), [](const auto& a, const auto& b) {
      return a.first.at != b.first.at ? a.first.at < b.first.at : a.second < b.second;
    });
    std::vector<Run> runs;
    uint32_t last = 0;  // the part that ends the last run
    for (const auto& [range, i] : ranges) {
      if (!runs.empty() && range.at < runs.back().end) {
        std::string name = "parts[" + std::to_string(i) + "].at";
        ThrowArg(env, method, name.c_str(), "an offset at or past the end of parts[" + std::to_string(last) + "] (parts must not overlap)",
                 parts.Get(i).As<Napi::Object>().Get("at"));
      }
      if (runs.empty() || range.at != runs.back().end) runs.push_back({range.at, range.at, {}});
      runs.back().pieces.push_back(range);
      runs.back().end = range.at + range.length;
      last = i;
    }
    return Start(info, method, fileBytes, false, std::move(runs), views);
  }

  // fill(path, fileBytes) -> Promise: a new file of fileBytes, every block written and durable.
  Napi::Value Fill(const Napi::CallbackInfo& info) {
    const char* method = "FileWriter.fill";
    uint64_t fileBytes = FileBytes(info, method);
    return Start(info, method, fileBytes, true, {}, Napi::Object::New(info.Env()));
  }

  // cancel(): a fill under way stops before its next piece and rejects with ECANCELED.
  Napi::Value Cancel(const Napi::CallbackInfo& info) {
    cancelled_.store(true);
    return info.Env().Undefined();
  }

 private:
  // info[0] a path, info[1] a byte count
  static uint64_t FileBytes(const Napi::CallbackInfo& info, const char* method) {
    Napi::Env env = info.Env();
    if (!info[0].IsString()) ThrowArg(env, method, "path", "a string", info[0]);
    double fileBytes = info[1].IsNumber() ? info[1].As<Napi::Number>().DoubleValue() : -1;
    if (fileBytes < 0 || fileBytes > 9007199254740991.0 || fileBytes != static_cast<double>(static_cast<uint64_t>(fileBytes))) {
      ThrowArg(env, method, "fileBytes", "a byte count", info[1]);
    }
    return static_cast<uint64_t>(fileBytes);
  }

  Napi::Value Start(const Napi::CallbackInfo& info, const char* method, uint64_t fileBytes, bool fill, std::vector<Run> runs, Napi::Object views) {
    if (busy_) throw Napi::Error::New(info.Env(), std::string(method) + ": the previous write has not ended");
    busy_ = true;
    cancelled_.store(false);
    auto* worker = new FileWriteWorker(info.Env(), ring_, busy_, cancelled_, info[0].As<Napi::String>().Utf8Value(), fileBytes, fill,
                                       std::move(runs), info.This().As<Napi::Object>(), views);
    worker->Queue();
    return worker->Promise();
  }

  Ring ring_;
  bool busy_ = false;
  std::atomic<bool> cancelled_{false};
};
}  // namespace

void InitFileWriter(Napi::Env env, Napi::Object exports) {
  exports.Set("FileWriter", FileWriter::DefineClass(env, "FileWriter", {FileWriter::InstanceMethod<&FileWriter::Write>("write"),
                                                                     FileWriter::InstanceMethod<&FileWriter::Fill>("fill"),
                                                                     FileWriter::InstanceMethod<&FileWriter::Cancel>("cancel")}));
  exports.Set("writeDurable", Napi::Function::New(env, WriteDurable, "writeDurable"));
}

}  // namespace ft
