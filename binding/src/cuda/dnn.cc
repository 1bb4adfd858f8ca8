// Convolutions through cuDNN's convolution API, linear layers and batched products through
// cuBLAS; see dnn.h.
#include "dnn.h"

#include <algorithm>
#include <map>
#include <memory>
#include <string>

#include "cuda_check.h"
#include "device_memory.h"
#include "kernels.h"

namespace ft::cuda {

namespace {
cudnnHandle_t Cudnn() {
  static cudnnHandle_t handle = [] {
    Device();
    cudnnHandle_t h;
    FT_CUDA_CHECK(cudnnCreate(&h));
    return h;
  }();
  return handle;
}

cublasHandle_t Cublas() {
  static cublasHandle_t handle = [] {
    Device();
    cublasHandle_t h;
    FT_CUDA_CHECK(cublasCreate(&h));
    // pedantic: float32 products computed as float32 (never TF32 or another reduced precision)
    FT_CUDA_CHECK(cublasSetMathMode(h, CUBLAS_PEDANTIC_MATH));
    return h;
  }();
  return handle;
}

// Descriptors and the chosen algorithms of one convolution shape, made once.
struct Conv {
  cudnnTensorDescriptor_t x, y, bias;
  cudnnFilterDescriptor_t w;
  cudnnConvolutionDescriptor_t conv;
  cudnnConvolutionFwdAlgo_t forward;
  cudnnConvolutionBwdDataAlgo_t backwardData;
  cudnnConvolutionBwdFilterAlgo_t backwardFilter;
  size_t workspace = 0;
  // the shape, its output size included
  ConvGeometry geometry;
  // the weight gradient by weight_gradient.cu's kernels instead of cuDNN's
  bool ownWeightGradient;
};

// The first algorithm the heuristics rank that is deterministic, uses FMA math (no tensor-core TF32)
// and fits in 1 GiB of workspace. Heuristics, not timing, so every process picks the same one.
template <typename Perf, typename Algo>
Algo Pick(const Perf* perf, int returned, const char* what, size_t* workspace) {
  for (int i = 0; i < returned; ++i) {
    if (perf[i].status == CUDNN_STATUS_SUCCESS && perf[i].determinism == CUDNN_DETERMINISTIC &&
        perf[i].mathType == CUDNN_FMA_MATH && perf[i].memory <= (size_t{1} << 30)) {
      *workspace = std::max(*workspace, perf[i].memory);
      return perf[i].algo;
    }
  }
  Fail(what, "cuDNN offers no deterministic float32 algorithm for this convolution");
}

Conv& ConvFor(const std::vector<int>& d) {
  static std::map<std::vector<int>, std::unique_ptr<Conv>> plans;
  auto& slot = plans[d];
  if (slot) return *slot;
  auto c = std::make_unique<Conv>();
  const int n = d[0], ch = d[1], h = d[2], w = d[3], k = d[4], r = d[5], s = d[6], stride = d[7], pad = d[8];
  FT_CUDA_CHECK(cudnnCreateTensorDescriptor(&c->x));
  FT_CUDA_CHECK(cudnnCreateTensorDescriptor(&c->y));
  FT_CUDA_CHECK(cudnnCreateTensorDescriptor(&c->bias));
  FT_CUDA_CHECK(cudnnCreateFilterDescriptor(&c->w));
  FT_CUDA_CHECK(cudnnCreateConvolutionDescriptor(&c->conv));
  FT_CUDA_CHECK(cudnnSetTensor4dDescriptor(c->x, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, n, ch, h, w));
  FT_CUDA_CHECK(cudnnSetFilter4dDescriptor(c->w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, k, ch, r, s));
  // cross-correlation, as oneDNN and PyTorch compute a "convolution"
  FT_CUDA_CHECK(cudnnSetConvolution2dDescriptor(c->conv, pad, pad, stride, stride, 1, 1, CUDNN_CROSS_CORRELATION,
                                                CUDNN_DATA_FLOAT));
  FT_CUDA_CHECK(cudnnSetConvolutionMathType(c->conv, CUDNN_FMA_MATH));
  int on, oc, oh, ow;
  FT_CUDA_CHECK(cudnnGetConvolution2dForwardOutputDim(c->conv, c->x, c->w, &on, &oc, &oh, &ow));
  c->geometry = ConvGeometry{n, ch, h, w, k, r, s, stride, pad, oh, ow};
  c->ownWeightGradient = OwnWeightGradient(c->geometry);
  FT_CUDA_CHECK(cudnnSetTensor4dDescriptor(c->y, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, n, k, oh, ow));
  FT_CUDA_CHECK(cudnnSetTensor4dDescriptor(c->bias, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1, k, 1, 1));
  cudnnHandle_t handle = Cudnn();
  int returned = 0;
  cudnnConvolutionFwdAlgoPerf_t forward[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
  FT_CUDA_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(handle, c->x, c->w, c->conv, c->y,
                                                        CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &returned, forward));
  c->forward = Pick<cudnnConvolutionFwdAlgoPerf_t, cudnnConvolutionFwdAlgo_t>(forward, returned, "conv2dForward",
                                                                              &c->workspace);
  cudnnConvolutionBwdDataAlgoPerf_t data[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
  FT_CUDA_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(handle, c->w, c->y, c->conv, c->x,
                                                             CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &returned, data));
  c->backwardData = Pick<cudnnConvolutionBwdDataAlgoPerf_t, cudnnConvolutionBwdDataAlgo_t>(
      data, returned, "conv2dBackwardData", &c->workspace);
  if (!c->ownWeightGradient) {
    cudnnConvolutionBwdFilterAlgoPerf_t filter[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
    FT_CUDA_CHECK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(
        handle, c->x, c->y, c->conv, c->w, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &returned, filter));
    c->backwardFilter = Pick<cudnnConvolutionBwdFilterAlgoPerf_t, cudnnConvolutionBwdFilterAlgo_t>(
        filter, returned, "conv2dBackwardWeights", &c->workspace);
  }
  slot = std::move(c);
  return *slot;
}

void* Workspace(const Conv& c) { return c.workspace > 0 ? ScratchOf(Scratch::kWorkspace, c.workspace) : nullptr; }

const float kOne = 1.0f, kZero = 0.0f;
}  // namespace

std::vector<int> ConvOutput(const std::vector<int>& dims) {
  Conv& c = ConvFor(dims);
  return {c.geometry.oh, c.geometry.ow};
}

void ConvForward(const std::vector<int>& dims, const float* x, const float* w, const float* b, float* y) {
  Conv& c = ConvFor(dims);
  FT_CUDA_CHECK(cudnnConvolutionForward(Cudnn(), &kOne, c.x, x, c.w, w, c.conv, c.forward, Workspace(c), c.workspace,
                                        &kZero, c.y, y));
  AddBias(y, b, dims[0], dims[4], static_cast<size_t>(c.geometry.oh) * c.geometry.ow);
}

void ConvBackwardData(const std::vector<int>& dims, const float* dy, const float* w, float* dx) {
  Conv& c = ConvFor(dims);
  FT_CUDA_CHECK(cudnnConvolutionBackwardData(Cudnn(), &kOne, c.w, w, c.y, dy, c.conv, c.backwardData, Workspace(c),
                                             c.workspace, &kZero, c.x, dx));
}

void ConvBackwardWeights(const std::vector<int>& dims, const float* x, const float* dy, float* dw, float* db) {
  Conv& c = ConvFor(dims);
  if (c.ownWeightGradient) {
    ConvWeightGradient(x, dy, dw, c.geometry);
  } else {
    FT_CUDA_CHECK(cudnnConvolutionBackwardFilter(Cudnn(), &kOne, c.x, x, c.y, dy, c.conv, c.backwardFilter,
                                                 Workspace(c), c.workspace, &kZero, c.w, dw));
  }
  SumPerChannel(dy, db, dims[0], dims[4], static_cast<size_t>(c.geometry.oh) * c.geometry.ow);
}

// Row-major [N, I] is column-major [I, N]: each product below is the row-major one transposed.
void LinearForward(int n, int in, int out, const float* x, const float* w, const float* b, float* y) {
  // y^T [O, N] = w [O, I] x^T [I, N]
  FT_CUDA_CHECK(cublasSgemm(Cublas(), CUBLAS_OP_T, CUBLAS_OP_N, out, n, in, &kOne, w, in, x, in, &kZero, y, out));
  AddBias(y, b, n, out, 1);
}

void LinearBackward(int n, int in, int out, const float* x, const float* w, const float* dy, float* dx,
                    float* dw, float* db) {
  if (dx != nullptr) {
    // dx^T [I, N] = w^T [I, O] dy^T [O, N]
    FT_CUDA_CHECK(cublasSgemm(Cublas(), CUBLAS_OP_N, CUBLAS_OP_N, in, n, out, &kOne, w, in, dy, out, &kZero, dx, in));
  }
  // dw^T [I, O] = x^T [I, N] dy [N, O]
  FT_CUDA_CHECK(cublasSgemm(Cublas(), CUBLAS_OP_N, CUBLAS_OP_T, in, out, n, &kOne, x, in, dy, out, &kZero, dw, in));
  SumPerChannel(dy, db, n, out, 1);
}

void BatchedGemm(int m, int n, int k, const BatchedOperand& a, const BatchedOperand& b, float* c, int ldc, long long strideC,
                 int batch) {
  const auto op = [](bool transposed) { return transposed ? CUBLAS_OP_T : CUBLAS_OP_N; };
  FT_CUDA_CHECK(cublasSgemmStridedBatched(Cublas(), op(a.transposed), op(b.transposed), m, n, k, &kOne, a.data, a.ld, a.stride, b.data,
                                          b.ld, b.stride, &kZero, c, ldc, strideC, batch));
}

}  // namespace ft::cuda
