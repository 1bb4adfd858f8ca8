// Batch normalisation, layer normalisation and global average pooling, forward and backward.
// Every sum runs in double, one value after another in a fixed order (sample, then position), so
// the results are the same bits as the TypeScript loops these kernels replace, on any machine, and
// in either activation layout: the blocked one changes where a channel's values lie, not their order.
// That order makes each sum one chain of dependent adds; the speed comes from running the chains
// of several channels (or samples) side by side, never from reordering a chain.
//
// Each kernel is built twice, for AVX-512 (x86-64-v4: side-by-side chains of doubles in vectors 4x
// the baseline's) and for the baseline (flatten inlines the loops into each build), and runs the one
// of the pinned level (kernel_level.h), never one the CPU alone picks. CMakeLists.txt builds this
// file with -ffp-contract=off, so neither build fuses a multiply and an add: both give the same bits.
#include <array>
#include <algorithm>
#include <cmath>
#include <string>
#include <type_traits>

#include "args.h"
#include "cpu_kernels.h"
#include "kernel_level.h"
#include "tensor_args.h"

// Defines kernel Name: the body that follows, inlined into an x86-64-v4 build and a baseline one, and
// the entry that runs the build of the pinned level.
#define FT_LEVEL_KERNEL(Name)                                                                           \
  static inline Napi::Value Name##Body(const Napi::CallbackInfo& info);                                 \
  __attribute__((target("arch=x86-64-v4"), flatten)) static Napi::Value Name##V4(const Napi::CallbackInfo& info) { \
    return Name##Body(info);                                                                            \
  }                                                                                                     \
  __attribute__((flatten)) static Napi::Value Name##Baseline(const Napi::CallbackInfo& info) {          \
    return Name##Body(info);                                                                            \
  }                                                                                                     \
  Napi::Value Name(const Napi::CallbackInfo& info) {                                                    \
    return VectorKernelsV4() ? Name##V4(info) : Name##Baseline(info);                                   \
  }                                                                                                     \
  static inline Napi::Value Name##Body(const Napi::CallbackInfo& info)

namespace ft::cpu {

namespace {
// `count` groups of values; group g is `runs` runs of `length` values `step` apart, run r starting at
// Start(g) + r * runStride. Groups come in bunches of `bunch` adjacent ones (the channels of one
// block of the blocked layout), a bunch `bunchStride` after the previous one.
// Batchnorm's channel c of [N, C, S] in the blocked layout (block B, C padded to Cp): runs N,
// length S, step B, runStride Cp S, bunch B, bunchStride S B; plain is the same with B = 1.
// A sample of [N, D], or a channel map of global pooling: runs 1, length D.
struct Groups {
  size_t count, runs, length, step, runStride, bunch, bunchStride;
  size_t Start(size_t g) const { return (g / bunch) * bunchStride + g % bunch; }
};

// How many chains of dependent adds run side by side: enough to hide the add's latency, few enough
// that the streams they read (one per chain's group and array) stay in L1's ways when groups lie a
// multiple of 4 KiB apart.
constexpr size_t kChains = 8;

// A block's lanes: Count of them, each a group's chain; Adjacent where they are a whole bunch of
// interleaved groups (the blocked layout), whose values at one position are Count adjacent floats,
// read as one vector (the same chains, the same adds in the same order: the bits do not change).
template <size_t Count, bool Adjacent>
struct Lanes {
  static constexpr size_t value = Count;
  static constexpr bool adjacent = Adjacent;
};

// Calls block(first, lanes) over the groups, N at a time, then one at a time.
template <size_t N, bool Adjacent, typename Block>
void InBlocks(size_t count, Block block) {
  size_t g = 0;
  for (; g + N <= count; g += N) block(g, Lanes<N, Adjacent>());
  for (; g < count; ++g) block(g, Lanes<1, false>());
}

// InBlocks with the lanes that suit the groups' layout, each chain making Sums sums: a bunch at a
// time where groups interleave (its chains all read one stream, each line once per pass).
template <size_t Sums, typename Block>
void InLaneBlocks(const Groups& groups, Block block) {
  if (groups.bunch == 16) {
    InBlocks<16, true>(groups.count, block);
  } else if (groups.bunch == 8) {
    InBlocks<8, true>(groups.count, block);
  } else if (groups.bunch > 1) {
    InBlocks<16, false>(groups.count, block);  // a line's worth of floats, gathered
  } else {
    InBlocks<kChains / Sums, false>(groups.count, block);
  }
}

template <typename L>
std::array<size_t, L::value> Starts(const Groups& groups, size_t first) {
  std::array<size_t, L::value> start;
  for (size_t lane = 0; lane < L::value; ++lane) start[lane] = groups.Start(first + lane);
  return start;
}

// Where a lane's group starts: adjacent lanes counted from the first, so that the compiler sees
// consecutive floats (one vector load per position) rather than values it must gather.
template <typename L>
size_t LaneStart(const std::array<size_t, L::value>& start, size_t lane) {
  return L::adjacent ? start[0] + lane : start[lane];
}

// For groups first .. first + L::value - 1, Sums double sums over each group's values in run order,
// then position order: term(g, at) gives the Sums values to add for the value at index `at`;
// done(g, sums) receives the totals.
template <size_t Sums, typename L, typename Term, typename Done>
void SumLanes(const Groups& groups, size_t first, Term term, Done done) {
  constexpr size_t kLanes = L::value;
  std::array<size_t, kLanes> start = Starts<L>(groups, first);
  std::array<std::array<double, kLanes>, Sums> acc{};
  for (size_t r = 0; r < groups.runs; ++r) {
    for (size_t i = 0; i < groups.length; ++i) {
      size_t offset = r * groups.runStride + i * groups.step;
      for (size_t lane = 0; lane < kLanes; ++lane) {
        std::array<double, Sums> t = term(first + lane, LaneStart<L>(start, lane) + offset);
        for (size_t s = 0; s < Sums; ++s) acc[s][lane] += t[s];
      }
    }
  }
  for (size_t lane = 0; lane < kLanes; ++lane) {
    std::array<double, Sums> sums;
    for (size_t s = 0; s < Sums; ++s) sums[s] = acc[s][lane];
    done(first + lane, sums);
  }
}

template <size_t Sums, typename Term, typename Done>
void SumGroups(const Groups& groups, Term term, Done done) {
  InLaneBlocks<Sums>(groups, [&](size_t first, auto lanes) { SumLanes<Sums, decltype(lanes)>(groups, first, term, done); });
}

// Calls f(at) for every value of group g: the element-wise passes.
template <typename F>
void ForEachValueOf(const Groups& groups, size_t g, F f) {
  size_t start = groups.Start(g);
  for (size_t r = 0; r < groups.runs; ++r) {
    for (size_t i = 0; i < groups.length; ++i) f(start + r * groups.runStride + i * groups.step);
  }
}

// Calls f(g, at) for every value of groups first .. first + L::value - 1: contiguous groups one
// after another, interleaved ones position by position, so that each line is visited once.
template <typename L, typename F>
void ForEachValueOfLanes(const Groups& groups, size_t first, F f) {
  constexpr size_t kLanes = L::value;
  if (groups.bunch == 1) {
    for (size_t g = first; g < first + kLanes; ++g) ForEachValueOf(groups, g, [&](size_t at) { f(g, at); });
    return;
  }
  std::array<size_t, kLanes> start = Starts<L>(groups, first);
  for (size_t r = 0; r < groups.runs; ++r) {
    for (size_t i = 0; i < groups.length; ++i) {
      size_t offset = r * groups.runStride + i * groups.step;
      for (size_t lane = 0; lane < kLanes; ++lane) f(first + lane, LaneStart<L>(start, lane) + offset);
    }
  }
}

// The channel block of `layout`'s [N, C, S] activations (1: plain), and C padded to it.
size_t BlockOf(Layout layout) { return layout == Layout::kBlocked ? static_cast<size_t>(ChannelBlock()) : 1; }
size_t Padded(size_t c, size_t block) { return (c + block - 1) / block * block; }

// [N, C, S] in `layout` as batchnorm's groups: one per channel.
Groups ChannelGroups(const std::vector<int>& d, Layout layout) {
  size_t n = d[0], c = d[1], s = d[2], block = BlockOf(layout);
  return Groups{c, n, s, block, Padded(c, block) * s, block, s * block};
}

// [N, C, S] in `layout` as global pooling's groups: one per channel map, padding channels included
// (map g is sample g / Cp's channel g % Cp).
Groups MapGroups(const std::vector<int>& d, Layout layout) {
  size_t n = d[0], c = d[1], s = d[2], block = BlockOf(layout);
  return Groups{n * Padded(c, block), 1, s, block, 0, block, s * block};
}

// Elements of an [N, C, S] activation in `layout`.
size_t ActivationSize(const std::vector<int>& d, Layout layout) {
  return static_cast<size_t>(d[0]) * Padded(d[1], BlockOf(layout)) * d[2];
}

// [N, D] as one group per sample.
Groups SampleGroups(size_t n, size_t d) { return Groups{n, 1, d, 1, 0, 1, d}; }

// Normalises each group of x in two passes, mean = sum(x) / m, then squares = sum((x - mean)^2);
// calls stats(g, mean, squares, invStd) once per group, invStd = 1 / sqrt(squares / m + eps), then
// value(g, at, mean, invStd) for each of its values.
template <typename Stats, typename Value>
void NormaliseGroups(const Groups& groups, const float* x, double eps, Stats stats, Value value) {
  double m = static_cast<double>(groups.runs * groups.length);
  InLaneBlocks<1>(groups, [&](size_t first, auto lanes) {
    using L = decltype(lanes);
    constexpr size_t kLanes = L::value;
    std::array<double, kLanes> mean, inv;
    using One = std::array<double, 1>;
    SumLanes<1, L>(
        groups, first, [&](size_t, size_t at) { return One{x[at]}; },
        [&](size_t g, const One& sum) { mean[g - first] = sum[0] / m; });
    SumLanes<1, L>(
        groups, first,
        [&](size_t g, size_t at) {
          double centred = x[at] - mean[g - first];
          return One{centred * centred};
        },
        [&](size_t g, const One& squares) {
          inv[g - first] = 1.0 / std::sqrt(squares[0] / m + eps);
          stats(g, mean[g - first], squares[0], inv[g - first]);
        });
    ForEachValueOfLanes<L>(groups, first, [&](size_t g, size_t at) { value(g, at, mean[g - first], inv[g - first]); });
  });
}
}  // namespace

// batchnormForwardTrain(x, w, b, y, xhat, mean, unbiased, invStd, eps, [N, C, S], layout?): per
// channel, the batch's mean, unbiased variance (0 when N S = 1) and 1 / sqrt(biased variance + eps),
// all Float64Array [C]; xhat = (x - mean) invStd (float32), y = xhat w + b. x, y and xhat in
// `layout`; the padding channels of y and xhat are left as they are.
FT_LEVEL_KERNEL(BatchnormForwardTrain) {
  const char* m = "batchnormForwardTrain";
  std::vector<int> d = DimsArg(info, 9, m, "shape", 3);
  Layout layout = LayoutArg(info, 10, m, "layout");
  size_t size = ActivationSize(d, layout), c = d[1];
  const float* x = FloatArg(info, 0, m, "x", size);
  const float* w = FloatArg(info, 1, m, "w", c);
  const float* b = FloatArg(info, 2, m, "b", c);
  float* y = FloatArg(info, 3, m, "y", size);
  float* xhat = FloatArg(info, 4, m, "xhat", size);
  double* mean = DoubleArg(info, 5, m, "mean", c);
  double* unbiased = DoubleArg(info, 6, m, "unbiased", c);
  double* invStd = DoubleArg(info, 7, m, "invStd", c);
  double eps = EpsArg(info, 8, m);
  Groups channels = ChannelGroups(d, layout);
  size_t values = channels.runs * channels.length;
  NormaliseGroups(
      channels, x, eps,
      [&](size_t ch, double mu, double squares, double inv) {
        mean[ch] = mu;
        unbiased[ch] = values > 1 ? squares / static_cast<double>(values - 1) : 0.0;
        invStd[ch] = inv;
      },
      [&](size_t ch, size_t at, double mu, double inv) {
        xhat[at] = static_cast<float>((x[at] - mu) * inv);
        y[at] = static_cast<float>(static_cast<double>(xhat[at]) * w[ch] + b[ch]);
      });
  return info.Env().Undefined();
}

// batchnormForwardEval(x, w, b, runningMean, runningVar, y, eps, [N, C, S], layout?):
// y = (x - runningMean) w / sqrt(runningVar + eps) + b.
FT_LEVEL_KERNEL(BatchnormForwardEval) {
  const char* m = "batchnormForwardEval";
  std::vector<int> d = DimsArg(info, 7, m, "shape", 3);
  Layout layout = LayoutArg(info, 8, m, "layout");
  size_t size = ActivationSize(d, layout), c = d[1];
  const float* x = FloatArg(info, 0, m, "x", size);
  const float* w = FloatArg(info, 1, m, "w", c);
  const float* b = FloatArg(info, 2, m, "b", c);
  const float* runningMean = FloatArg(info, 3, m, "runningMean", c);
  const float* runningVar = FloatArg(info, 4, m, "runningVar", c);
  float* y = FloatArg(info, 5, m, "y", size);
  double eps = EpsArg(info, 6, m);
  Groups channels = ChannelGroups(d, layout);
  for (size_t ch = 0; ch < c; ++ch) {
    double scale = w[ch] / std::sqrt(runningVar[ch] + eps);
    double mu = runningMean[ch];
    ForEachValueOf(channels, ch, [&](size_t at) { y[at] = static_cast<float>((x[at] - mu) * scale + b[ch]); });
  }
  return info.Env().Undefined();
}

// batchnormBackward(dy, xhat, w, invStd, dx | null, dw, db, [N, C, S], layout?): per channel
// dw = sum(dy xhat), db = sum(dy), dx = w invStd (dy - mean(dy) - xhat mean(dy xhat)).
FT_LEVEL_KERNEL(BatchnormBackward) {
  const char* m = "batchnormBackward";
  std::vector<int> d = DimsArg(info, 7, m, "shape", 3);
  Layout layout = LayoutArg(info, 8, m, "layout");
  size_t size = ActivationSize(d, layout), c = d[1];
  const float* dy = FloatArg(info, 0, m, "dy", size);
  const float* xhat = FloatArg(info, 1, m, "xhat", size);
  const float* w = FloatArg(info, 2, m, "w", c);
  const double* invStd = DoubleArg(info, 3, m, "invStd", c);
  float* dx = info[4].IsNull() ? nullptr : FloatArg(info, 4, m, "dx", size);
  float* dw = FloatArg(info, 5, m, "dw", c);
  float* db = FloatArg(info, 6, m, "db", c);
  Groups channels = ChannelGroups(d, layout);
  double values = static_cast<double>(channels.runs * channels.length);
  InLaneBlocks<2>(channels, [&](size_t first, auto lanes) {
    using L = decltype(lanes);
    constexpr size_t kLanes = L::value;
    std::array<double, kLanes> scale, meanDy, meanDyXhat;
    SumLanes<2, L>(
        channels, first,
        [&](size_t, size_t at) { return std::array<double, 2>{dy[at], static_cast<double>(dy[at]) * xhat[at]}; },
        [&](size_t ch, const std::array<double, 2>& sums) {
          db[ch] = static_cast<float>(sums[0]);
          dw[ch] = static_cast<float>(sums[1]);
          scale[ch - first] = w[ch] * invStd[ch];
          meanDy[ch - first] = sums[0] / values;
          meanDyXhat[ch - first] = sums[1] / values;
        });
    if (dx == nullptr) return;
    ForEachValueOfLanes<L>(channels, first, [&](size_t ch, size_t at) {
      size_t lane = ch - first;
      dx[at] = static_cast<float>(scale[lane] * (dy[at] - meanDy[lane] - xhat[at] * meanDyXhat[lane]));
    });
  });
  return info.Env().Undefined();
}

// layernormForward(x, w, b, y, xhat, invStd, eps, [N, D]): per sample, over its D values,
// invStd = 1 / sqrt(biased variance + eps) (Float64Array [N]), xhat = (x - mean) invStd (float32),
// y = xhat w + b with w and b of D values.
FT_LEVEL_KERNEL(LayernormForward) {
  const char* m = "layernormForward";
  std::vector<int> dims = DimsArg(info, 7, m, "shape", 2);
  size_t n = dims[0], d = dims[1];
  const float* x = FloatArg(info, 0, m, "x", n * d);
  const float* w = FloatArg(info, 1, m, "w", d);
  const float* b = FloatArg(info, 2, m, "b", d);
  float* y = FloatArg(info, 3, m, "y", n * d);
  float* xhat = FloatArg(info, 4, m, "xhat", n * d);
  double* invStd = DoubleArg(info, 5, m, "invStd", n);
  double eps = EpsArg(info, 6, m);
  NormaliseGroups(
      SampleGroups(n, d), x, eps, [&](size_t sample, double, double, double inv) { invStd[sample] = inv; },
      [&](size_t sample, size_t at, double mu, double inv) {
        size_t i = at - sample * d;
        xhat[at] = static_cast<float>((x[at] - mu) * inv);
        y[at] = static_cast<float>(static_cast<double>(xhat[at]) * w[i] + b[i]);
      });
  return info.Env().Undefined();
}

// layernormBackward(dy, xhat, w, invStd, dx | null, dw, db, [N, D]): with g = dy w, per sample
// dx = invStd (g - mean(g) - xhat mean(g xhat)); dw = sum_n dy xhat, db = sum_n dy.
FT_LEVEL_KERNEL(LayernormBackward) {
  const char* m = "layernormBackward";
  std::vector<int> dims = DimsArg(info, 7, m, "shape", 2);
  size_t n = dims[0], d = dims[1];
  const float* dy = FloatArg(info, 0, m, "dy", n * d);
  const float* xhat = FloatArg(info, 1, m, "xhat", n * d);
  const float* w = FloatArg(info, 2, m, "w", d);
  const double* invStd = DoubleArg(info, 3, m, "invStd", n);
  float* dx = info[4].IsNull() ? nullptr : FloatArg(info, 4, m, "dx", n * d);
  float* dw = FloatArg(info, 5, m, "dw", d);
  float* db = FloatArg(info, 6, m, "db", d);
  // per position, over the samples in order: its values are one apart within a sample, d apart across
  SumGroups<2>(
      Groups{d, n, 1, 1, d, 1, 1},
      [&](size_t, size_t at) { return std::array<double, 2>{static_cast<double>(dy[at]) * xhat[at], dy[at]}; },
      [&](size_t i, const std::array<double, 2>& sums) {
        dw[i] = static_cast<float>(sums[0]);
        db[i] = static_cast<float>(sums[1]);
      });
  if (dx == nullptr) return info.Env().Undefined();
  SumGroups<2>(
      SampleGroups(n, d),
      [&](size_t sample, size_t at) {
        double g = static_cast<double>(dy[at]) * w[at - sample * d];
        return std::array<double, 2>{g, g * xhat[at]};
      },
      [&](size_t sample, const std::array<double, 2>& sums) {
        double meanG = sums[0] / d, meanGXhat = sums[1] / d;
        size_t base = sample * d;
        for (size_t i = 0; i < d; ++i) {
          double g = static_cast<double>(dy[base + i]) * w[i];
          dx[base + i] = static_cast<float>(invStd[sample] * (g - meanG - xhat[base + i] * meanGXhat));
        }
      });
  return info.Env().Undefined();
}

// globalAvgPoolForward(x, y, [N, C, S], layout?): y[N, C] = the mean of each channel's map of S
// values, x in `layout`.
FT_LEVEL_KERNEL(GlobalAvgPoolForward) {
  const char* m = "globalAvgPoolForward";
  std::vector<int> d = DimsArg(info, 2, m, "shape", 3);
  Layout layout = LayoutArg(info, 3, m, "layout");
  size_t c = d[1], area = d[2], padded = Padded(c, BlockOf(layout));
  const float* x = FloatArg(info, 0, m, "x", ActivationSize(d, layout));
  float* y = FloatArg(info, 1, m, "y", d[0] * c);
  SumGroups<1>(
      MapGroups(d, layout), [&](size_t, size_t at) { return std::array<double, 1>{x[at]}; },
      [&](size_t map, const std::array<double, 1>& sums) {
        size_t sample = map / padded, ch = map % padded;
        if (ch < c) y[sample * c + ch] = static_cast<float>(sums[0] / area);
      });
  return info.Env().Undefined();
}

// globalAvgPoolBackward(dy, dx, [N, C, S], layout?): dx = dy / S at every position of the channel's
// map, dx in `layout` (its padding channels 0).
FT_LEVEL_KERNEL(GlobalAvgPoolBackward) {
  const char* m = "globalAvgPoolBackward";
  std::vector<int> d = DimsArg(info, 2, m, "shape", 3);
  Layout layout = LayoutArg(info, 3, m, "layout");
  size_t c = d[1], area = d[2], padded = Padded(c, BlockOf(layout));
  const float* dy = FloatArg(info, 0, m, "dy", d[0] * c);
  float* dx = FloatArg(info, 1, m, "dx", ActivationSize(d, layout));
  Groups maps = MapGroups(d, layout);
  for (size_t map = 0; map < maps.count; ++map) {
    size_t sample = map / padded, ch = map % padded;
    float value = ch < c ? static_cast<float>(static_cast<double>(dy[sample * c + ch]) / area) : 0.0f;
    ForEachValueOf(maps, map, [&](size_t at) { dx[at] = value; });
  }
  return info.Env().Undefined();
}

}  // namespace ft::cpu
