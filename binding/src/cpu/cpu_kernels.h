// The CPU kernels (oneDNN, OpenBLAS, plain loops). Each runs synchronously on the caller's thread
// over Float32Arrays and checks its arguments first. Exposed to JS as `addon.cpu`.
#pragma once
#include <napi.h>

namespace ft::cpu {

Napi::Value Conv2dForward(const Napi::CallbackInfo& info);
Napi::Value Conv2dBackwardData(const Napi::CallbackInfo& info);
Napi::Value Conv2dBackwardWeights(const Napi::CallbackInfo& info);
Napi::Value Pool2dWorkspaceBytes(const Napi::CallbackInfo& info);
Napi::Value Pool2dForward(const Napi::CallbackInfo& info);
Napi::Value Pool2dBackward(const Napi::CallbackInfo& info);
Napi::Value ConvertLayout(const Napi::CallbackInfo& info);
Napi::Value SetWinograd(const Napi::CallbackInfo& info);
// The channel block of the blocked activation layout oneDNN's convolutions use here (16 with
// AVX-512, 8 with AVX2), or 1 where they use none.
int ChannelBlock();
Napi::Value LinearForward(const Napi::CallbackInfo& info);
Napi::Value LinearBackward(const Napi::CallbackInfo& info);
Napi::Value BatchnormForwardTrain(const Napi::CallbackInfo& info);
Napi::Value BatchnormForwardEval(const Napi::CallbackInfo& info);
Napi::Value BatchnormBackward(const Napi::CallbackInfo& info);
Napi::Value LayernormForward(const Napi::CallbackInfo& info);
Napi::Value LayernormBackward(const Napi::CallbackInfo& info);
Napi::Value GlobalAvgPoolForward(const Napi::CallbackInfo& info);
Napi::Value GlobalAvgPoolBackward(const Napi::CallbackInfo& info);
Napi::Value ReluForward(const Napi::CallbackInfo& info);
Napi::Value ReluBackward(const Napi::CallbackInfo& info);
Napi::Value AddInPlace(const Napi::CallbackInfo& info);
Napi::Value SoftmaxCrossEntropy(const Napi::CallbackInfo& info);
Napi::Value SgdUpdate(const Napi::CallbackInfo& info);
Napi::Value SgdStateInput(const Napi::CallbackInfo& info);
Napi::Value SgdReplay(const Napi::CallbackInfo& info);
Napi::Value AdamwUpdate(const Napi::CallbackInfo& info);
Napi::Value AdamwReplay(const Napi::CallbackInfo& info);
Napi::Value DropoutMask(const Napi::CallbackInfo& info);
Napi::Value Multiply(const Napi::CallbackInfo& info);
Napi::Value AttentionForward(const Napi::CallbackInfo& info);
Napi::Value AttentionBackward(const Napi::CallbackInfo& info);
Napi::Value GeluForward(const Napi::CallbackInfo& info);
Napi::Value GeluBackward(const Napi::CallbackInfo& info);
Napi::Value EmbeddingForward(const Napi::CallbackInfo& info);
Napi::Value EmbeddingBackward(const Napi::CallbackInfo& info);
Napi::Value SumOfSquares(const Napi::CallbackInfo& info);
Napi::Value ScaleInPlace(const Napi::CallbackInfo& info);

// Row-major c[m,n] = alpha op(a) op(b) + beta c on OpenBLAS alone (op transposing where `trans*` is
// 'T'; blas_kernels.cc): single-threaded, so it may run inside an OpenMP loop, one call per thread.
void OpenBlasGemm(char transA, char transB, size_t m, size_t n, size_t k, float alpha, const float* a, size_t lda,
                  const float* b, size_t ldb, float beta, float* c, size_t ldc);

// The `cpu` object: the kernels above, channelBlock and setThreads(n).
Napi::Object Exports(Napi::Env env);

}  // namespace ft::cpu
