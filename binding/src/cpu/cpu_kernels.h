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

// The `cpu` object: the kernels above, channelBlock and setThreads(n).
Napi::Object Exports(Napi::Env env);

}  // namespace ft::cpu
