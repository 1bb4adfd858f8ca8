// Convolution and pooling on oneDNN, forward and backward, and the reorders between the two layouts
// activations take: plain NCHW and the channel-blocked layout the convolutions compute in (nChw16c
// with AVX-512, nChw8c with AVX2: channels padded with zeros to a multiple of the block), so that a
// run of convolutions and poolings keeps its activations blocked instead of reordering at every layer.
// A convolution whose input channels the blocks would pad beyond one block computes in nhwc instead.
// Primitives (and their reorders) are created once per shape and layouts and cached; they run on the
// caller's thread with the OpenMP thread count set by setThreads().
#include <dnnl.hpp>

#include <algorithm>
#include <map>
#include <unordered_map>
#include <memory>
#include <string>
#include <tuple>

#include "cpu_kernels.h"
#include "args.h"
#include "tensor_args.h"

namespace ft::cpu {

namespace {
using dnnl::algorithm;
using dnnl::memory;
using dnnl::prop_kind;
using Tag = memory::format_tag;
constexpr auto kF32 = memory::data_type::f32;

dnnl::engine& Engine() {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

dnnl::stream& Stream() {
  static dnnl::stream stream(Engine());
  return stream;
}

memory Wrap(const memory::desc& desc, float* data) { return memory(desc, Engine(), data); }

// The blocked layout: nChw16c or nChw8c after ChannelBlock(), plain where the convolutions use none.
Tag BlockedTag() {
  static const Tag tag = [] {
    int block = ChannelBlock();
    return block == 16 ? Tag::nChw16c : block == 8 ? Tag::nChw8c : Tag::nchw;
  }();
  return tag;
}

memory::desc ActivationDesc(const memory::dims& dims, Layout layout) {
  return memory::desc(dims, kF32, layout == Layout::kBlocked ? BlockedTag() : Tag::nchw);
}

// One argument of a convolution primitive: the caller's plain buffer, and the blocked layout the
// primitive prefers (format "any"), with cached reorders between them. oneDNN's direct jit
// convolutions need blocked layouts; on plain ones it falls back to im2col + GEMM.
class Staged {
 public:
  Staged() = default;
  Staged(const memory::desc& user, const memory::desc& wanted) : user_(user) {
    if (user == wanted) return;
    buffer_ = memory(wanted, Engine());
    toInternal_ = dnnl::reorder(dnnl::reorder::primitive_desc(Engine(), user, Engine(), wanted));
    toUser_ = dnnl::reorder(dnnl::reorder::primitive_desc(Engine(), wanted, Engine(), user));
  }
  const memory::desc& user() const { return user_; }
  // The primitive's view of an input, reordered from `data`.
  memory In(float* data) {
    memory plain = Wrap(user_, data);
    if (!buffer_) return plain;
    toInternal_.execute(Stream(), plain, buffer_);
    return buffer_;
  }
  // Where the primitive writes an output; Out() then copies it to `data`.
  memory Target(float* data) const { return buffer_ ? buffer_ : Wrap(user_, data); }
  void Out(float* data) {
    if (!buffer_) return;
    memory plain = Wrap(user_, data);
    toUser_.execute(Stream(), buffer_, plain);
  }

 private:
  memory::desc user_;
  memory buffer_;
  dnnl::reorder toInternal_, toUser_;
};

// conv shape: [N, C, H, W, K, R, S, stride, pad]; y is [N, K, OH, OW]. The primitives pick their
// layouts (format "any"); Staged reorders only where the caller's layout differs, so the same
// primitives, and the same bits, whatever the caller's layouts.
struct Conv {
  memory::desc bias;
  dnnl::convolution_forward forward;
  Staged fwdSrc, fwdWeights, fwdDst;
  dnnl::convolution_backward_data backwardData;
  Staged bdDiffDst, bdWeights, bdDiffSrc;
  dnnl::convolution_backward_weights backwardWeights;
  Staged bwSrc, bwDiffDst, bwDiffWeights;
};

// Winograd F(4x4, 3x3) (oneDNN's jit_wino_4x3, AVX-512 only) for 3x3 stride-1 convolutions whose
// input and output channels are multiples of 16. Here, against the direct kernels at batch 64: 1.6-2.1x
// faster in all three passes at 32 and 64 channels (resnet8's 16x16 and 8x8 stages); at 16 channels
// (32x32) 1.5x faster for the weight gradient but slower forward and for the input gradient, so
// there the weight gradient alone takes it. Chosen by shape alone, never by timing, so that every rank
// takes the same path and computes the same bits. setWinograd(false) keeps it off.
bool winogradOn = true;

struct ConvAlgorithms {
  algorithm data;     // forward and input gradient
  algorithm weights;  // weight gradient
};

ConvAlgorithms AlgorithmsFor(int c, int k, int r, int s, int stride) {
  bool fits = winogradOn && r == 3 && s == 3 && stride == 1 && c % 16 == 0 && k % 16 == 0;
  auto pick = [&](bool wanted) { return fits && wanted ? algorithm::convolution_winograd : algorithm::convolution_direct; };
  return {pick(c >= 32 && k >= 32), pick(true)};
}

std::unique_ptr<Conv> MakeConv(const std::vector<int>& d, Layout srcLayout, Layout dstLayout, ConvAlgorithms algs) {
  int n = d[0], c = d[1], h = d[2], w = d[3], k = d[4], r = d[5], s = d[6], stride = d[7], pad = d[8];
  int oh = (h + 2 * pad - r) / stride + 1, ow = (w + 2 * pad - s) / stride + 1;
  auto conv = std::make_unique<Conv>();
  memory::desc src = ActivationDesc({n, c, h, w}, srcLayout), weights({k, c, r, s}, kF32, Tag::oihw),
      dst = ActivationDesc({n, k, oh, ow}, dstLayout);
  // Input channels past one block but not a multiple of it: the blocked layout would pad them to
  // the next multiple (lenet's conv2: 20 to 32), and oneDNN's nhwc kernels, which do not pad, took
  // 8.0 ms for its forward and backward against 11.6. Elsewhere the primitive picks its layout.
  int block = ChannelBlock();
  Tag computed = block > 1 && c > block && c % block != 0 ? Tag::nhwc : Tag::any;
  memory::desc anySrc({n, c, h, w}, kF32, computed), anyWeights({k, c, r, s}, kF32, Tag::any),
      anyDst({n, k, oh, ow}, kF32, computed);
  conv->bias = memory::desc({k}, kF32, Tag::x);
  memory::dims strides{stride, stride}, padding{pad, pad};
  auto forwardPd = dnnl::convolution_forward::primitive_desc(
      dnnl::convolution_forward::desc(prop_kind::forward_training, algs.data, anySrc, anyWeights,
                                      conv->bias, anyDst, strides, padding, padding),
      Engine());
  conv->forward = dnnl::convolution_forward(forwardPd);
  conv->fwdSrc = Staged(src, forwardPd.src_desc());
  conv->fwdWeights = Staged(weights, forwardPd.weights_desc());
  conv->fwdDst = Staged(dst, forwardPd.dst_desc());
  auto dataPd = dnnl::convolution_backward_data::primitive_desc(
      dnnl::convolution_backward_data::desc(algs.data, anySrc, anyWeights, anyDst, strides, padding,
                                            padding),
      Engine(), forwardPd);
  conv->backwardData = dnnl::convolution_backward_data(dataPd);
  conv->bdDiffDst = Staged(dst, dataPd.diff_dst_desc());
  conv->bdWeights = Staged(weights, dataPd.weights_desc());
  conv->bdDiffSrc = Staged(src, dataPd.diff_src_desc());
  auto weightsPd = dnnl::convolution_backward_weights::primitive_desc(
      dnnl::convolution_backward_weights::desc(algs.weights, anySrc, anyWeights, conv->bias, anyDst,
                                               strides, padding, padding),
      Engine(), forwardPd);
  conv->backwardWeights = dnnl::convolution_backward_weights(weightsPd);
  conv->bwSrc = Staged(src, weightsPd.src_desc());
  conv->bwDiffDst = Staged(dst, weightsPd.diff_dst_desc());
  conv->bwDiffWeights = Staged(weights, weightsPd.diff_weights_desc());
  return conv;
}

Conv& ConvFor(const std::vector<int>& d, Layout srcLayout, Layout dstLayout) {
  static std::map<std::tuple<std::vector<int>, Layout, Layout, bool>, std::unique_ptr<Conv>> cache;
  auto& slot = cache[{d, srcLayout, dstLayout, winogradOn}];
  if (slot) return *slot;
  ConvAlgorithms algs = AlgorithmsFor(d[1], d[4], d[5], d[6], d[7]);
  try {
    slot = MakeConv(d, srcLayout, dstLayout, algs);
  } catch (const dnnl::error&) {
    constexpr ConvAlgorithms direct{algorithm::convolution_direct, algorithm::convolution_direct};
    if (algs.data == direct.data && algs.weights == direct.weights) throw;
    slot = MakeConv(d, srcLayout, dstLayout, direct);  // no Winograd kernel for this ISA or shape
  }
  return *slot;
}

// pool shape: [N, C, H, W, R, stride, pad]; y is [N, C, OH, OW], in x's layout.
struct Pool {
  memory::desc src, dst, workspace;
  dnnl::pooling_forward forward;
  dnnl::pooling_backward backward;
};

Pool& PoolFor(algorithm kind, const std::vector<int>& d, Layout layout) {
  static std::map<std::tuple<algorithm, std::vector<int>, Layout>, std::unique_ptr<Pool>> cache;
  auto& slot = cache[{kind, d, layout}];
  if (slot) return *slot;
  int n = d[0], c = d[1], h = d[2], w = d[3], r = d[4], stride = d[5], pad = d[6];
  int oh = (h + 2 * pad - r) / stride + 1, ow = (w + 2 * pad - r) / stride + 1;
  auto pool = std::make_unique<Pool>();
  pool->src = ActivationDesc({n, c, h, w}, layout);
  pool->dst = ActivationDesc({n, c, oh, ow}, layout);
  memory::dims strides{stride, stride}, kernel{r, r}, padding{pad, pad};
  auto forwardPd = dnnl::pooling_forward::primitive_desc(
      dnnl::pooling_forward::desc(prop_kind::forward_training, kind, pool->src, pool->dst, strides,
                                  kernel, padding, padding),
      Engine());
  pool->workspace = forwardPd.workspace_desc();
  pool->forward = dnnl::pooling_forward(forwardPd);
  pool->backward = dnnl::pooling_backward(dnnl::pooling_backward::primitive_desc(
      dnnl::pooling_backward::desc(kind, pool->src, pool->dst, strides, kernel, padding, padding),
      Engine(), forwardPd));
  slot = std::move(pool);
  return *slot;
}

algorithm PoolKindArg(const Napi::CallbackInfo& info, const char* method) {
  return MaxPoolingArg(info, method) ? algorithm::pooling_max : algorithm::pooling_avg_include_padding;
}

size_t Count(const memory::desc& desc) { return desc.get_size() / sizeof(float); }
}  // namespace

// conv2dForward(x, w, b, y, shape, xLayout?, yLayout?): y = conv(x, w) + b.
Napi::Value Conv2dForward(const Napi::CallbackInfo& info) {
  const char* m = "conv2dForward";
  Conv& conv = ConvFor(ConvShapeArg(info, 4, m), LayoutArg(info, 5, m, "xLayout"), LayoutArg(info, 6, m, "yLayout"));
  float* x = FloatArg(info, 0, m, "x", Count(conv.fwdSrc.user()));
  float* w = FloatArg(info, 1, m, "w", Count(conv.fwdWeights.user()));
  float* b = FloatArg(info, 2, m, "b", Count(conv.bias));
  float* y = FloatArg(info, 3, m, "y", Count(conv.fwdDst.user()));
  conv.forward.execute(Stream(), {{DNNL_ARG_SRC, conv.fwdSrc.In(x)},
                                  {DNNL_ARG_WEIGHTS, conv.fwdWeights.In(w)},
                                  {DNNL_ARG_BIAS, Wrap(conv.bias, b)},
                                  {DNNL_ARG_DST, conv.fwdDst.Target(y)}});
  conv.fwdDst.Out(y);
  Stream().wait();
  return info.Env().Undefined();
}

// conv2dBackwardData(dy, w, dx, shape, xLayout?, yLayout?): dx = the gradient of the input.
Napi::Value Conv2dBackwardData(const Napi::CallbackInfo& info) {
  const char* m = "conv2dBackwardData";
  Conv& conv = ConvFor(ConvShapeArg(info, 3, m), LayoutArg(info, 4, m, "xLayout"), LayoutArg(info, 5, m, "yLayout"));
  float* dy = FloatArg(info, 0, m, "dy", Count(conv.bdDiffDst.user()));
  float* w = FloatArg(info, 1, m, "w", Count(conv.bdWeights.user()));
  float* dx = FloatArg(info, 2, m, "dx", Count(conv.bdDiffSrc.user()));
  conv.backwardData.execute(Stream(), {{DNNL_ARG_DIFF_DST, conv.bdDiffDst.In(dy)},
                                       {DNNL_ARG_WEIGHTS, conv.bdWeights.In(w)},
                                       {DNNL_ARG_DIFF_SRC, conv.bdDiffSrc.Target(dx)}});
  conv.bdDiffSrc.Out(dx);
  Stream().wait();
  return info.Env().Undefined();
}

// conv2dBackwardWeights(x, dy, dw, db, shape, xLayout?, yLayout?): dw, db = the gradients of weights and bias.
Napi::Value Conv2dBackwardWeights(const Napi::CallbackInfo& info) {
  const char* m = "conv2dBackwardWeights";
  Conv& conv = ConvFor(ConvShapeArg(info, 4, m), LayoutArg(info, 5, m, "xLayout"), LayoutArg(info, 6, m, "yLayout"));
  float* x = FloatArg(info, 0, m, "x", Count(conv.bwSrc.user()));
  float* dy = FloatArg(info, 1, m, "dy", Count(conv.bwDiffDst.user()));
  float* dw = FloatArg(info, 2, m, "dw", Count(conv.bwDiffWeights.user()));
  float* db = FloatArg(info, 3, m, "db", Count(conv.bias));
  conv.backwardWeights.execute(Stream(), {{DNNL_ARG_SRC, conv.bwSrc.In(x)},
                                          {DNNL_ARG_DIFF_DST, conv.bwDiffDst.In(dy)},
                                          {DNNL_ARG_DIFF_WEIGHTS, conv.bwDiffWeights.Target(dw)},
                                          {DNNL_ARG_DIFF_BIAS, Wrap(conv.bias, db)}});
  conv.bwDiffWeights.Out(dw);
  Stream().wait();
  return info.Env().Undefined();
}

// pool2dWorkspaceBytes(kind, shape, layout?): bytes of the workspace pool2dForward fills for the backward.
Napi::Value Pool2dWorkspaceBytes(const Napi::CallbackInfo& info) {
  const char* m = "pool2dWorkspaceBytes";
  Pool& pool = PoolFor(PoolKindArg(info, m), PoolShapeArg(info, 1, m), LayoutArg(info, 2, m, "layout"));
  return Napi::Number::New(info.Env(), static_cast<double>(pool.workspace.get_size()));
}

// pool2dForward(kind, x, y, workspace, shape, layout?)
Napi::Value Pool2dForward(const Napi::CallbackInfo& info) {
  const char* m = "pool2dForward";
  Pool& pool = PoolFor(PoolKindArg(info, m), PoolShapeArg(info, 4, m), LayoutArg(info, 5, m, "layout"));
  float* x = FloatArg(info, 1, m, "x", Count(pool.src));
  float* y = FloatArg(info, 2, m, "y", Count(pool.dst));
  uint8_t* ws = BytesArg(info, 3, m, "workspace", pool.workspace.get_size());
  std::unordered_map<int, memory> args{{DNNL_ARG_SRC, Wrap(pool.src, x)},
                                       {DNNL_ARG_DST, Wrap(pool.dst, y)}};
  if (pool.workspace.get_size() > 0) args.emplace(DNNL_ARG_WORKSPACE, memory(pool.workspace, Engine(), ws));
  pool.forward.execute(Stream(), args);
  Stream().wait();
  return info.Env().Undefined();
}

// pool2dBackward(kind, dy, dx, workspace, shape, layout?)
Napi::Value Pool2dBackward(const Napi::CallbackInfo& info) {
  const char* m = "pool2dBackward";
  Pool& pool = PoolFor(PoolKindArg(info, m), PoolShapeArg(info, 4, m), LayoutArg(info, 5, m, "layout"));
  float* dy = FloatArg(info, 1, m, "dy", Count(pool.dst));
  float* dx = FloatArg(info, 2, m, "dx", Count(pool.src));
  uint8_t* ws = BytesArg(info, 3, m, "workspace", pool.workspace.get_size());
  std::unordered_map<int, memory> args{{DNNL_ARG_DIFF_DST, Wrap(pool.dst, dy)},
                                       {DNNL_ARG_DIFF_SRC, Wrap(pool.src, dx)}};
  if (pool.workspace.get_size() > 0) args.emplace(DNNL_ARG_WORKSPACE, memory(pool.workspace, Engine(), ws));
  pool.backward.execute(Stream(), args);
  Stream().wait();
  return info.Env().Undefined();
}

// setWinograd(on): whether AlgorithmsFor may pick Winograd (default true; off: direct everywhere).
Napi::Value SetWinograd(const Napi::CallbackInfo& info) {
  Napi::Value on = info[0];
  if (!on.IsBoolean()) ThrowArg(info.Env(), "setWinograd", "on", "a boolean", on);
  winogradOn = on.As<Napi::Boolean>();
  return info.Env().Undefined();
}

int ChannelBlock() {
  // Asked of a probe convolution wide enough to be blocked on any ISA oneDNN has a direct kernel for.
  static const int block = [] {
    memory::desc any({1, 64, 8, 8}, kF32, Tag::any), anyWeights({64, 64, 3, 3}, kF32, Tag::any);
    auto pd = dnnl::convolution_forward::primitive_desc(
        dnnl::convolution_forward::desc(prop_kind::forward_training, algorithm::convolution_direct,
                                        any, anyWeights, any, {1, 1}, {1, 1}, {1, 1}),
        Engine());
    const auto& blocking = pd.dst_desc().data.format_desc.blocking;
    bool channelsOnly = blocking.inner_nblks == 1 && blocking.inner_idxs[0] == 1;
    int picked = channelsOnly ? static_cast<int>(blocking.inner_blks[0]) : 1;
    return picked == 16 || picked == 8 ? picked : 1;
  }();
  return block;
}

// convertLayout(x, y, shape, to): y = the [N, C, H, W] activation x, from the other layout into `to`.
Napi::Value ConvertLayout(const Napi::CallbackInfo& info) {
  const char* m = "convertLayout";
  std::vector<int> d = DimsArg(info, 2, m, "shape", 4);
  Layout to = LayoutArg(info, 3, m, "to");
  Layout from = to == Layout::kBlocked ? Layout::kPlain : Layout::kBlocked;
  static std::map<std::pair<std::vector<int>, Layout>, dnnl::reorder> cache;
  memory::desc src = ActivationDesc({d[0], d[1], d[2], d[3]}, from);
  memory::desc dst = ActivationDesc({d[0], d[1], d[2], d[3]}, to);
  float* x = FloatArg(info, 0, m, "x", Count(src));
  float* y = FloatArg(info, 1, m, "y", Count(dst));
  auto& reorder = cache[{d, to}];
  if (!reorder) reorder = dnnl::reorder(dnnl::reorder::primitive_desc(Engine(), src, Engine(), dst));
  memory source = Wrap(src, x), target = Wrap(dst, y);
  reorder.execute(Stream(), source, target);
  Stream().wait();
  return info.Env().Undefined();
}

}  // namespace ft::cpu
