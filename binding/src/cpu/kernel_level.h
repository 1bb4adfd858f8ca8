// The instruction-set level every CPU kernel runs at, pinned once per process: oneDNN's maximum ISA,
// OpenBLAS's core type and blocking, and which build of this addon's own vector kernels runs. The
// libraries left alone choose by the CPU and by environment variables, so ranks on unlike hosts (or
// started with another environment, as sshd starts them) computed other bits; pinned, every process
// at one level computes the same. The job agrees on the level over its ranks (src/rank); a process
// that runs a kernel before anything pinned one pins its host's highest.
#pragma once
#include <cblas.h>
#include <napi.h>

#include <string>

namespace ft::cpu {

// The x86-64 microarchitecture levels (each includes the one below); kNative: nothing pinned, each
// library chooses for itself (the fastest, but the bits depend on the CPU and the environment).
enum class Level { kNative = 0, kV2 = 2, kV3 = 3, kV4 = 4 };

// The level the kernels run at, pinning the host's highest if nothing pinned one yet.
Level KernelLevel();

// Whether this process runs the x86-64-v4 build of the addon's own vector kernels.
bool VectorKernelsV4();

// OpenBLAS's single-precision product, from the library loaded for the pinned level.
using SgemmFn = void (*)(enum CBLAS_ORDER, enum CBLAS_TRANSPOSE, enum CBLAS_TRANSPOSE, blasint, blasint, blasint,
                         float, const float*, blasint, const float*, blasint, float, float*, blasint);
SgemmFn OpenBlasSgemm();

// hostLevel(), pinLevel(level), kernelSettings() on the `cpu` object.
void AddLevelExports(Napi::Env env, Napi::Object cpu);

}  // namespace ft::cpu
