// The compute backend that layers call, one implementation per device. Shapes are plain tuples so
// that the GPU backend (cuDNN, cuBLAS; src/nn/cuda.ts) slots in beside the CPU one without touching the layers.
// All tensors are row-major Float32Arrays: activations NCHW, convolution weights OIHW
// (out, in, kh, kw), linear weights [out, in]. Convolutions, poolings, batchnorm and global average
// pooling also take activations in the backend's blocked layout (see channelBlock), so that a run of
// them skips the reorders between.

/** `[N, C, H, W, K, R, S, stride, pad]`: input N x C x H x W, K filters of C x R x S. */
export type ConvShape = [number, number, number, number, number, number, number, number, number];
/** `[N, C, H, W, R, stride, pad]`: an R x R window. */
export type PoolShape = [number, number, number, number, number, number, number];
/** `[N, I, O]`: N samples, I inputs, O outputs. */
export type LinearShape = [number, number, number];
export type PoolKind = 'max' | 'avg';
/** `[N, T, H, D]`: N sequences of T positions, H heads of D values each (the model width C = H D). */
export type AttentionShape = [number, number, number, number];
/** `[N, T, C, V]`: N sequences of T positions, C values per position, a vocabulary of V tokens. */
export type EmbeddingShape = [number, number, number, number];
/** `[N, C, S]`: N samples of C channels of S values each (S = H x W, or 1 for features [C]). */
export type NormShape = [number, number, number];
/**
 * An [N, C, H, W] activation's layout: 'plain' NCHW, or 'blocked': channels in groups of
 * channelBlock, each group's values of one pixel adjacent (oneDNN's nChw16c / nChw8c), C padded with
 * zeros to a multiple of channelBlock. Element-wise kernels take either alike.
 */
export type Layout = 'plain' | 'blocked';

/** An x86-64 instruction-set level the CPU kernels are pinned to, or 'native': each library chooses for the CPU it runs on (and what its environment says). */
export type CpuLevel = 'x86-64-v2' | 'x86-64-v3' | 'x86-64-v4' | 'native';
/** The levels, lowest first (each includes the one below). */
export const cpuLevels: readonly Exclude<CpuLevel, 'native'>[] = ['x86-64-v2', 'x86-64-v3', 'x86-64-v4'];

/** What fixes the CPU kernels' bits in a process (beside the thread count). */
export interface KernelSettings {
  level: CpuLevel;
  /** oneDNN's version, and the ISA it dispatches to */
  onednn: string;
  onednnIsa: string;
  /** openblas_get_config(), and the core whose kernels OpenBLAS runs */
  openblas: string;
  openblasCore: string;
  /** which build of the addon's own vector kernels runs: 'x86-64-v4' or 'baseline' */
  vectorKernels: string;
}

/** Where a backend's kernels compute: the CPU, or an NVIDIA GPU (binding/src/cuda). */
export type Device = 'cpu' | 'cuda';

export interface Backend {
  /**
   * Where the kernels compute. On 'cuda' every array a kernel takes names its device copy (its
   * mirror): kernels read and write device memory only, and values cross between host and device
   * only through upload and download.
   */
  readonly device: Device;
  /** The values of host into the kernels' copy of `mirrored` (same length): on the CPU, a copy unless they are the same array. */
  upload(host: Float32Array, mirrored: Float32Array): void;
  /** The kernels' copy of `mirrored` into host's values (same length): on the CPU, a copy unless they are the same array. */
  download(mirrored: Float32Array, host: Float32Array): void;
  /** A zeroed host array that upload reads fastest: page-locked memory on a GPU (its copy engine reads it directly), a plain Float32Array on the CPU. */
  hostArray(length: number): Float32Array;
  /** The highest level this process may pin: its CPU's (or lower, FT_CPU_LEVEL_MAX's, to act as a host of that level). */
  hostLevel(): CpuLevel;
  /**
   * Pins the level every kernel of this process runs at, before the first (which otherwise pins
   * hostLevel()): oneDNN's maximum ISA, OpenBLAS's core, the vector kernels' build. Throws when
   * the host cannot run it, or when another level is pinned already.
   */
  pinLevel(level: CpuLevel): void;
  /** The pinned level and the libraries' settings (pinning hostLevel() if nothing pinned one). */
  kernelSettings(): KernelSettings;
  /** Threads each kernel may use (one rank per core: 1). */
  setThreads(threads: number): void;
  /**
   * Whether 3x3 stride-1 convolutions over multiples of 16 channels may compute by Winograd where
   * that is faster (default true; binding/src/cpu/dnnl_kernels.cc): other bits than direct ones.
   */
  setWinograd(on: boolean): void;
  /** The channel group of the 'blocked' layout: 16 at x86-64-v4, 8 below (read once the level is pinned). */
  readonly channelBlock: number;
  /** y[N,K,OH,OW] = conv(x, w) + b. Layouts of x (and dx) and y (and dy): 'plain' unless given. */
  conv2dForward(
    x: Float32Array,
    w: Float32Array,
    b: Float32Array,
    y: Float32Array,
    shape: ConvShape,
    xLayout?: Layout,
    yLayout?: Layout,
  ): void;
  conv2dBackwardData(dy: Float32Array, w: Float32Array, dx: Float32Array, shape: ConvShape, xLayout?: Layout, yLayout?: Layout): void;
  conv2dBackwardWeights(
    x: Float32Array,
    dy: Float32Array,
    dw: Float32Array,
    db: Float32Array,
    shape: ConvShape,
    xLayout?: Layout,
    yLayout?: Layout,
  ): void;
  /** Bytes of the workspace a pooling forward leaves for its backward (the argmax of max pooling). */
  pool2dWorkspaceBytes(kind: PoolKind, shape: PoolShape, layout?: Layout): number;
  /** y in x's layout ('plain' unless given). */
  pool2dForward(kind: PoolKind, x: Float32Array, y: Float32Array, workspace: Uint8Array, shape: PoolShape, layout?: Layout): void;
  pool2dBackward(kind: PoolKind, dy: Float32Array, dx: Float32Array, workspace: Uint8Array, shape: PoolShape, layout?: Layout): void;
  /** y = the [N, C, H, W] activation x, reordered from the other layout into `to`. */
  convertLayout(x: Float32Array, y: Float32Array, shape: [number, number, number, number], to: Layout): void;
  /** y[N,O] = x[N,I] w[O,I]^T + b. */
  linearForward(x: Float32Array, w: Float32Array, b: Float32Array, y: Float32Array, shape: LinearShape): void;
  /** dx (skipped when null) = dy w; dw = dy^T x; db = column sums of dy. */
  linearBackward(
    x: Float32Array,
    w: Float32Array,
    dy: Float32Array,
    dx: Float32Array | null,
    dw: Float32Array,
    db: Float32Array,
    shape: LinearShape,
  ): void;
  /**
   * Batchnorm on the batch's statistics, per channel over N x S values: mean, unbiased variance (0
   * when N S = 1) and invStd = 1 / sqrt(biased variance + eps) into the [C] arrays; xhat = (x - mean)
   * invStd; y = xhat w + b. Sums in float64, sample by sample, then position by position, in either
   * layout (x, y, xhat and, below, dy and dx in `layout`, 'plain' unless given; the blocked one for
   * [N, C, H, W] with S = H W). On every backend mean and unbiased are left in host memory too (the
   * layer reads them there for the running statistics); invStd is the backend's, for the backward.
   */
  batchnormForwardTrain(
    x: Float32Array,
    w: Float32Array,
    b: Float32Array,
    y: Float32Array,
    xhat: Float32Array,
    mean: Float64Array,
    unbiased: Float64Array,
    invStd: Float64Array,
    eps: number,
    shape: NormShape,
    layout?: Layout,
  ): void;
  /** y = (x - runningMean) w / sqrt(runningVar + eps) + b, per channel. */
  batchnormForwardEval(
    x: Float32Array,
    w: Float32Array,
    b: Float32Array,
    runningMean: Float32Array,
    runningVar: Float32Array,
    y: Float32Array,
    eps: number,
    shape: NormShape,
    layout?: Layout,
  ): void;
  /** Per channel: dw = sum(dy xhat), db = sum(dy), dx (skipped when null) = w invStd (dy - mean(dy) - xhat mean(dy xhat)). */
  batchnormBackward(
    dy: Float32Array,
    xhat: Float32Array,
    w: Float32Array,
    invStd: Float64Array,
    dx: Float32Array | null,
    dw: Float32Array,
    db: Float32Array,
    shape: NormShape,
    layout?: Layout,
  ): void;
  /**
   * Layernorm of each of N samples over its D values: invStd[N] = 1 / sqrt(biased variance + eps),
   * xhat = (x - mean) invStd, y = xhat w + b (w, b: [D]). Sums in float64, in position order.
   */
  layernormForward(
    x: Float32Array,
    w: Float32Array,
    b: Float32Array,
    y: Float32Array,
    xhat: Float32Array,
    invStd: Float64Array,
    eps: number,
    shape: [number, number],
  ): void;
  /** With g = dy w, per sample: dx (skipped when null) = invStd (g - mean(g) - xhat mean(g xhat)); dw = sum_n dy xhat, db = sum_n dy. */
  layernormBackward(
    dy: Float32Array,
    xhat: Float32Array,
    w: Float32Array,
    invStd: Float64Array,
    dx: Float32Array | null,
    dw: Float32Array,
    db: Float32Array,
    shape: [number, number],
  ): void;
  /** y[N, C] = the mean of each channel's S values of x[N, C, S] (float64 sum, in order); x in `layout`. */
  globalAvgPoolForward(x: Float32Array, y: Float32Array, shape: NormShape, layout?: Layout): void;
  /** dx = dy / S at every position of each channel's map; dx in `layout`. */
  globalAvgPoolBackward(dy: Float32Array, dx: Float32Array, shape: NormShape, layout?: Layout): void;
  reluForward(x: Float32Array, y: Float32Array): void;
  reluBackward(x: Float32Array, dy: Float32Array, dx: Float32Array): void;
  /**
   * Causal multi-head self-attention. qkv[N, T, 3C] holds each position's query, key and value side
   * by side ([0, C), [C, 2C), [2C, 3C)), head h's D values at [h D, (h + 1) D) of each. att[N, H, T, T]
   * = softmax(q k^T / sqrt(D)) over positions <= the row's (the rest 0), the max subtracted first;
   * y[N, T, C] = att v, heads side by side. Each (sequence, head) is computed alone in a fixed order:
   * the bits do not depend on the thread count.
   */
  attentionForward(qkv: Float32Array, att: Float32Array, y: Float32Array, shape: AttentionShape): void;
  /** dqkv (overwritten) for dy, from the forward's qkv and att. */
  attentionBackward(qkv: Float32Array, att: Float32Array, dy: Float32Array, dqkv: Float32Array, shape: AttentionShape): void;
  /** y = GELU(x) = x Phi(x) (the exact one, with erf), each value in double then rounded. */
  geluForward(x: Float32Array, y: Float32Array): void;
  /** dx = dy GELU'(x). */
  geluBackward(x: Float32Array, dy: Float32Array, dx: Float32Array): void;
  /**
   * y[N, T, C] = wte[token] + wpe[t], token = x[n stride + t] (a float holding an integer in [0, V);
   * anything else is refused naming the sequence and position).
   */
  embeddingForward(x: Float32Array, stride: number, wte: Float32Array, wpe: Float32Array, y: Float32Array, shape: EmbeddingShape): void;
  /**
   * dwpe (overwritten) = the sum over sequences of dy, in sequence order; dwte: zeroed first unless
   * `accumulate`, then dy[n, t] added into its token's row, n then t in order.
   */
  embeddingBackward(
    x: Float32Array,
    stride: number,
    dy: Float32Array,
    dwte: Float32Array,
    dwpe: Float32Array,
    shape: EmbeddingShape,
    accumulate: boolean,
  ): void;
  /**
   * Inverted dropout's mask: mask[i] = 0 where uniform(...keys, i) < p (src/base/random.ts's
   * counter-based draw, keys as its), else 1 / (1 - p) rounded to float32. p in [0, 1).
   */
  dropoutMask(mask: Float32Array, p: number, keys: readonly number[]): void;
  /** y = a b, element-wise (in float32). */
  multiply(a: Float32Array, b: Float32Array, y: Float32Array): void;
  /** The sum of x's squares in double, in a fixed order (blocks of 2^16 in order, each in order): the same bits at any thread count. */
  sumOfSquares(x: Float32Array): number;
  /** x *= scale, element-wise (in float32). */
  scaleInPlace(x: Float32Array, scale: number): void;
  /** acc += x, element-wise. */
  addInPlace(acc: Float32Array, x: Float32Array): void;
  /** y = x (the same length), in the backend's memory. */
  copy(x: Float32Array, y: Float32Array): void;
  /** Mean cross-entropy of softmax(logits) against labels; dlogits = (softmax - onehot) / N. */
  softmaxCrossEntropy(logits: Float32Array, labels: Int32Array, dlogits: Float32Array, shape: [number, number]): number;
  /**
   * v = momentum v + (g + weightDecay p); p -= lr v. Given paramsOut and velocityOut, the updated
   * values go there and params and velocity stay as they were (an output is its input or does not
   * overlap it).
   */
  sgdUpdate(
    params: Float32Array,
    grads: Float32Array,
    velocity: Float32Array,
    lr: number,
    momentum: number,
    weightDecay: number,
    paramsOut?: Float32Array,
    velocityOut?: Float32Array,
  ): void;
  /** input = g + weightDecay p: what sgdUpdate adds to the momentum (the same bits). */
  sgdStateInput(params: Float32Array, grads: Float32Array, weightDecay: number, input: Float32Array): void;
  /** v = momentum v + input: sgdUpdate's momentum step alone. */
  sgdReplay(velocity: Float32Array, input: Float32Array, momentum: number): void;
  /**
   * PyTorch's AdamW, in float32: p *= 1 - lr wd; m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g g;
   * p -= lr / (1 - b1^step) * m / (sqrt(v) / sqrt(1 - b2^step) + eps). `step` counts from 1.
   * Given paramsOut, mOut and vOut, the updated values go there, as in sgdUpdate.
   */
  adamwUpdate(
    params: Float32Array,
    grads: Float32Array,
    m: Float32Array,
    v: Float32Array,
    lr: number,
    beta1: number,
    beta2: number,
    eps: number,
    weightDecay: number,
    step: number,
    paramsOut?: Float32Array,
    mOut?: Float32Array,
    vOut?: Float32Array,
  ): void;
  /** adamwUpdate's moment updates alone (the same bits). */
  adamwReplay(m: Float32Array, v: Float32Array, grads: Float32Array, beta1: number, beta2: number): void;
}
