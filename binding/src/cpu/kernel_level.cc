// The instruction-set level every CPU kernel runs at (kernel_level.h). oneDNN takes its maximum ISA,
// ISA hints and floating-point mode through its API before its first primitive; OpenBLAS reads its
// core type and settings from the environment while it loads, so this addon does not link it: it
// loads it (dlopen, the soname the linker would have used) once the level is pinned, with those
// variables set by the level for the load alone, whatever the process's environment says.
#include "kernel_level.h"

#include <dlfcn.h>
#include <oneapi/dnnl/dnnl.h>
#include <strings.h>

#include <array>
#include <atomic>
#include <cstdlib>
#include <optional>
#include <stdexcept>
#include <utility>
#include <vector>

#include "args.h"

namespace ft::cpu {

namespace {
struct LevelInfo {
  Level level;
  const char* name;
  dnnl_cpu_isa_t onednnIsa;
  const char* onednnIsaName;
  const char* openblasCore;
};

// OpenBLAS's cores whose kernels the levels run: Nehalem (SSE4.2), Haswell (AVX2, FMA), SkylakeX
// (AVX-512), the same kernels and blocking on any CPU that has the level's instructions.
constexpr std::array<LevelInfo, 3> kLevels{{
    {Level::kV2, "x86-64-v2", dnnl_cpu_isa_sse41, "sse41", "Nehalem"},
    {Level::kV3, "x86-64-v3", dnnl_cpu_isa_avx2, "avx2", "Haswell"},
    {Level::kV4, "x86-64-v4", dnnl_cpu_isa_avx512_core, "avx512_core", "SkylakeX"},
}};
constexpr const char* kNativeName = "native";
constexpr const char* kLimitVariable = "FT_CPU_LEVEL_MAX";

const LevelInfo* Find(Level level) {
  for (const LevelInfo& info : kLevels) {
    if (info.level == level) return &info;
  }
  return nullptr;
}

std::string LevelName(Level level) { return level == Level::kNative ? kNativeName : Find(level)->name; }

std::string LevelNames() {
  std::string names;
  for (const LevelInfo& info : kLevels) names += (names.empty() ? "" : ", ") + std::string(info.name);
  return names;
}

std::optional<Level> ParseLevel(const std::string& name) {
  if (name == kNativeName) return Level::kNative;
  for (const LevelInfo& info : kLevels) {
    if (name == info.name) return info.level;
  }
  return std::nullopt;
}

// The highest level this CPU (and its operating system, for the AVX-512 state) runs.
Level CpuLevel() {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("x86-64-v4")) return Level::kV4;
  if (__builtin_cpu_supports("x86-64-v3")) return Level::kV3;
  if (__builtin_cpu_supports("x86-64-v2")) return Level::kV2;
  throw std::runtime_error("this CPU lacks x86-64-v2 (SSE4.2, POPCNT): the kernels need at least that level");
}

// The CPU's level, or lower where FT_CPU_LEVEL_MAX says so: a rank then acts as a host of that level
// would (tests and drills make a cluster of unlike hosts on one machine that way).
Level HostLevel() {
  Level cpu = CpuLevel();
  const char* limit = std::getenv(kLimitVariable);
  if (limit == nullptr || *limit == '\0') return cpu;
  std::optional<Level> capped = ParseLevel(limit);
  if (!capped || *capped == Level::kNative) {
    throw std::runtime_error(std::string(kLimitVariable) + " must be one of " + LevelNames() + ", got '" + limit + "'");
  }
  return std::min(cpu, *capped);
}

void CheckOneDnn(dnnl_status_t status, const char* call) {
  if (status != dnnl_success) {
    throw std::runtime_error(std::string("oneDNN's ") + call + " failed (dnnl_status_t " + std::to_string(status) +
                             "): it must run before any oneDNN primitive is made");
  }
}

// oneDNN at the level's ISA, no ISA hints (ONEDNN_CPU_ISA_HINTS would have AVX-512 kernels use
// 256-bit vectors), strict float32 math (ONEDNN_DEFAULT_FPMATH_MODE would allow bf16).
void PinOneDnn(const LevelInfo& info) {
  dnnl_status_t hints = dnnl_set_cpu_isa_hints(dnnl_cpu_isa_no_hints);
  if (hints != dnnl_unimplemented) CheckOneDnn(hints, "dnnl_set_cpu_isa_hints");  // unimplemented: the build reads no hints
  CheckOneDnn(dnnl_set_max_cpu_isa(info.onednnIsa), "dnnl_set_max_cpu_isa");
  CheckOneDnn(dnnl_set_default_fpmath_mode(dnnl_fpmath_mode_strict), "dnnl_set_default_fpmath_mode");
  if (dnnl_get_effective_cpu_isa() != info.onednnIsa) {
    throw std::runtime_error(std::string("oneDNN did not take the maximum ISA ") + info.onednnIsaName);
  }
}

// The variables OpenBLAS reads while it loads that change which kernels run or how they block
// (and so the bits): each set to the level's value, or unset, for the load alone.
struct EnvironmentFor {
  explicit EnvironmentFor(const std::vector<std::pair<const char*, const char*>>& settings) {
    for (const auto& [name, value] : settings) {
      const char* before = std::getenv(name);
      saved_.emplace_back(name, before ? std::optional<std::string>(before) : std::nullopt);
      if (value != nullptr) {
        setenv(name, value, 1);
      } else {
        unsetenv(name);
      }
    }
  }
  ~EnvironmentFor() {
    for (const auto& [name, value] : saved_) {
      if (value) {
        setenv(name, value->c_str(), 1);
      } else {
        unsetenv(name);
      }
    }
  }
  EnvironmentFor(const EnvironmentFor&) = delete;
  EnvironmentFor& operator=(const EnvironmentFor&) = delete;

 private:
  std::vector<std::pair<const char*, std::optional<std::string>>> saved_;
};

struct OpenBlas {
  SgemmFn sgemm = nullptr;
  std::string config;
  std::string core;
};

template <typename Fn>
Fn Symbol(void* library, const char* name) {
  void* symbol = dlsym(library, name);
  if (symbol == nullptr) throw std::runtime_error(std::string("OpenBLAS has no ") + name + ": " + dlerror());
  return reinterpret_cast<Fn>(symbol);
}

// OpenBLAS (libopenblas.so.0) with the level's core, and one thread (it starts no workers). Its
// cores from Nehalem up block by constants of their own; OPENBLAS_L2_SIZE (read from OpenBLAS 0.3.28
// on) sizes only older cores' blocking, and is unset all the same. A core whose instructions the CPU
// lacks would die of SIGILL as it loads: Pin() checks the host's level first.
OpenBlas LoadOpenBlas(const LevelInfo* info) {
  void* library;
  {
    std::vector<std::pair<const char*, const char*>> settings{{"OPENBLAS_NUM_THREADS", "1"}};
    if (info != nullptr) {
      settings.insert(settings.end(), {{"OPENBLAS_CORETYPE", info->openblasCore}, {"OPENBLAS_L2_SIZE", nullptr}});
    }
    EnvironmentFor environment(settings);
    dlerror();
    library = dlopen("libopenblas.so.0", RTLD_NOW | RTLD_LOCAL);
  }
  if (library == nullptr) throw std::runtime_error(std::string("cannot load OpenBLAS: ") + dlerror());
  OpenBlas blas;
  blas.sgemm = Symbol<SgemmFn>(library, "cblas_sgemm");
  Symbol<void (*)(int)>(library, "openblas_set_num_threads")(1);
  blas.config = Symbol<char* (*)()>(library, "openblas_get_config")();
  blas.core = Symbol<char* (*)()>(library, "openblas_get_corename")();
  // another copy loaded earlier (LD_PRELOAD, another library's dependency) chose its core already;
  // and a core name OpenBLAS does not know falls back to one by the CPU's features, silently
  if (info != nullptr && strcasecmp(blas.core.c_str(), info->openblasCore) != 0) {
    throw std::runtime_error(std::string("OpenBLAS runs its ") + blas.core + " kernels, not " + info->openblasCore +
                             " (was it loaded before the level was pinned, by LD_PRELOAD or another library?)");
  }
  return blas;
}

struct Pinned {
  Level level;
  bool vectorV4;
  OpenBlas blas;
};

// Set once, on the JS thread (every kernel runs there); read by the kernels.
std::atomic<const Pinned*> pinned{nullptr};

const Pinned& Pin(Level level) {
  if (const Pinned* now = pinned.load()) {
    if (now->level == level) return *now;
    throw std::runtime_error("the CPU kernels run at " + LevelName(now->level) + " already: a process cannot change to " +
                             LevelName(level));
  }
  Level host = HostLevel();
  if (level != Level::kNative && level > host) {
    throw std::runtime_error("this host runs up to " + LevelName(host) + ", not " + LevelName(level));
  }
  const LevelInfo* info = Find(level);
  if (info != nullptr) PinOneDnn(*info);
  auto* next = new Pinned{level, level == Level::kNative ? host == Level::kV4 : level == Level::kV4, LoadOpenBlas(info)};
  pinned.store(next);  // kept for the process's life
  return *next;
}

const Pinned& Current() {
  const Pinned* now = pinned.load();
  return now != nullptr ? *now : Pin(HostLevel());
}

std::string OneDnnVersion() {
  const dnnl_version_t* v = dnnl_version();
  return std::to_string(v->major) + "." + std::to_string(v->minor) + "." + std::to_string(v->patch);
}

std::string OneDnnIsa(Level level) {
  if (level != Level::kNative) return Find(level)->onednnIsaName;
  switch (dnnl_get_effective_cpu_isa()) {
    case dnnl_cpu_isa_sse41: return "sse41";
    case dnnl_cpu_isa_avx: return "avx";
    case dnnl_cpu_isa_avx2: return "avx2";
    case dnnl_cpu_isa_avx2_vnni: return "avx2_vnni";
    case dnnl_cpu_isa_avx512_core: return "avx512_core";
    case dnnl_cpu_isa_avx512_core_vnni: return "avx512_core_vnni";
    case dnnl_cpu_isa_avx512_core_bf16: return "avx512_core_bf16";
    case dnnl_cpu_isa_avx512_core_amx: return "avx512_core_amx";
    default: return "isa " + std::to_string(dnnl_get_effective_cpu_isa());
  }
}

// hostLevel(): the highest level this process may pin (its CPU's, or FT_CPU_LEVEL_MAX's).
Napi::Value HostLevelOf(const Napi::CallbackInfo& info) { return Napi::String::New(info.Env(), LevelName(HostLevel())); }

// pinLevel(level): 'x86-64-v2' | 'x86-64-v3' | 'x86-64-v4' | 'native'.
Napi::Value PinLevel(const Napi::CallbackInfo& info) {
  Napi::Value value = info[0];
  std::optional<Level> level = value.IsString() ? ParseLevel(value.As<Napi::String>()) : std::nullopt;
  if (!level) ThrowArg(info.Env(), "pinLevel", "level", "one of " + LevelNames() + " or native", value);
  Pin(*level);
  return info.Env().Undefined();
}

// kernelSettings(): what fixes the kernels' bits in this process (pinning the host's level if
// nothing did yet).
Napi::Value KernelSettings(const Napi::CallbackInfo& info) {
  const Pinned& now = Current();
  Napi::Object settings = Napi::Object::New(info.Env());
  settings.Set("level", LevelName(now.level));
  settings.Set("onednn", OneDnnVersion());
  settings.Set("onednnIsa", OneDnnIsa(now.level));
  settings.Set("openblas", now.blas.config);
  settings.Set("openblasCore", now.blas.core);
  settings.Set("vectorKernels", now.vectorV4 ? "x86-64-v4" : "baseline");
  return settings;
}
}  // namespace

Level KernelLevel() { return Current().level; }

bool VectorKernelsV4() { return Current().vectorV4; }

SgemmFn OpenBlasSgemm() { return Current().blas.sgemm; }

void AddLevelExports(Napi::Env env, Napi::Object cpu) {
  cpu.Set("hostLevel", Napi::Function::New(env, HostLevelOf, "hostLevel"));
  cpu.Set("pinLevel", Napi::Function::New(env, PinLevel, "pinLevel"));
  cpu.Set("kernelSettings", Napi::Function::New(env, KernelSettings, "kernelSettings"));
}

}  // namespace ft::cpu
