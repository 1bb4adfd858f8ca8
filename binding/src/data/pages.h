// Memory mapped ahead of its first write, off the JS thread.
#pragma once
#include <napi.h>

#include <cstddef>
#include <cstdint>

namespace ft {

// Asks the kernel for huge pages over the 2 MiB-aligned part of [start, start + bytes), best
// effort (nothing changes where transparent huge pages are off): before the memory is first
// written, it is then mapped 2 MiB at a time. Whether the advice was taken.
bool AdviseHugePages(uintptr_t start, size_t bytes);

// canPopulate() -> bool: whether this kernel maps memory writable without writing it
// (MADV_POPULATE_WRITE, Linux 5.14).
Napi::Value CanPopulate(const Napi::CallbackInfo& info);

// mapMemory(bytes, hugePages) -> { memory: ArrayBuffer, mapped: Promise<boolean> }: `bytes` of
// fresh zero pages of their own (mmap: never memory a C library would zero on this thread first),
// with huge pages asked first where `hugePages`, unmapped when the ArrayBuffer is collected. Where
// the kernel can (canPopulate), a pool thread maps them writable without writing them, so the
// caller may use the memory meanwhile; `mapped` resolves once it is done (false: not done).
Napi::Value MapMemory(const Napi::CallbackInfo& info);

}  // namespace ft
