// Argument checks on the caller's side (c10d style), before anything is queued: one message format,
// "<method>: expected <name> to be <what>, got <what it was>".
#pragma once
#include <mpi.h>
#include <napi.h>

#include <string>
#include <vector>

namespace ft {

// A typed array's memory as MPI sees it.
struct Buffer {
  Napi::Value value;
  void* data;
  int count;  // elements
  MPI_Datatype type;
  napi_typedarray_type kind;
};

// The first byte of a typed array's elements (its view into the ArrayBuffer).
inline uint8_t* DataOf(const Napi::TypedArray& array) {
  return static_cast<uint8_t*>(array.ArrayBuffer().Data()) + array.ByteOffset();
}

[[noreturn]] void ThrowArg(Napi::Env env, const char* method, const char* name,
                           const std::string& expected, const std::string& got);
[[noreturn]] void ThrowArg(Napi::Env env, const char* method, const char* name,
                           const std::string& expected, Napi::Value got);

Buffer BufferArg(const Napi::CallbackInfo& info, size_t index, const char* method, const char* name);

int IntArg(const Napi::CallbackInfo& info, size_t index, const char* method, const char* name,
           int min, int max);

// An Array of strings.
std::vector<std::string> StringsArg(const Napi::CallbackInfo& info, size_t index, const char* method,
                                    const char* name);

// An Array or Int32Array of `length` non-negative element counts.
std::vector<int> CountsArg(const Napi::CallbackInfo& info, size_t index, const char* method,
                           const char* name, int length);

MPI_Op ReduceOpArg(const Napi::CallbackInfo& info, size_t index, const char* method);

// Exclusive prefix sums of `counts`; throws unless they add up to `total` elements.
std::vector<int> Displacements(Napi::Env env, const std::vector<int>& counts, int total,
                               const char* method, const char* countsName, const char* bufferName);

// Given displacements (element offsets, one per rank): each block [displs[i], displs[i] + counts[i])
// must lie within the buffer's `total` elements; receive blocks (`disjoint`) must not overlap.
void CheckDisplacements(Napi::Env env, const std::vector<int>& counts, const std::vector<int>& displs,
                        int total, bool disjoint, const char* method, const char* displsName,
                        const char* bufferName);

}  // namespace ft
