// FileWriter: writes byte ranges of a file straight to the disk (O_DIRECT) off the JS thread,
// through staging buffers allocated and touched once, then fsyncs the file.
// writeDurable: a small file written and made durable in one task off the JS thread.
#pragma once
#include <napi.h>

namespace ft {

void InitFileWriter(Napi::Env env, Napi::Object exports);

}  // namespace ft
