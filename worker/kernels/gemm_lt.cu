// See gemm_lt_launch.h. Host code only: descriptors, a heuristic query, cublasLtMatmul calls.
#include <cublasLt.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "worker/kernels/gemm_lt_launch.h"

namespace mt::kernels {
namespace {

cudaDataType_t DataTypeOf(FloatKind kind) {
  switch (kind) {
    case FloatKind::kBFloat16:
      return CUDA_R_16BF;
    case FloatKind::kFloat16:
      return CUDA_R_16F;
    default:
      return CUDA_R_32F;
  }
}

cublasLtEpilogue_t EpilogueOf(LtEpilogue e) {
  switch (e) {
    case LtEpilogue::kBias:
      return CUBLASLT_EPILOGUE_BIAS;
    case LtEpilogue::kGeluBias:
      return CUBLASLT_EPILOGUE_GELU_BIAS;
    case LtEpilogue::kGeluAuxBias:
      return CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    case LtEpilogue::kDGelu:
      return CUBLASLT_EPILOGUE_DGELU;
    case LtEpilogue::kDGeluBGrad:
      return CUBLASLT_EPILOGUE_DGELU_BGRAD;
    case LtEpilogue::kBGradB:
      return CUBLASLT_EPILOGUE_BGRADB;
    default:
      return CUBLASLT_EPILOGUE_DEFAULT;
  }
}

// The largest power of two (up to 256, cuBLASLt's default assumption) dividing the address:
// cuBLASLt must be told when a buffer is less aligned than that, or it may pick a kernel that
// reads past what the address allows.
uint32_t AlignmentOf(const void* p) {
  const auto address = reinterpret_cast<uintptr_t>(p);
  uint32_t a = 256;
  while (a > 1 && address % a != 0) a /= 2;
  return a;
}

// The descriptors of one call, destroyed with it.
struct Descriptors {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulPreference_t preference = nullptr;
  ~Descriptors() {
    if (preference != nullptr) cublasLtMatmulPreferenceDestroy(preference);
    if (d != nullptr) cublasLtMatrixLayoutDestroy(d);
    if (b != nullptr) cublasLtMatrixLayoutDestroy(b);
    if (a != nullptr) cublasLtMatrixLayoutDestroy(a);
    if (op != nullptr) cublasLtMatmulDescDestroy(op);
  }
};

#define MT_LT_TRY(call)                                             \
  do {                                                              \
    const cublasStatus_t mt_lt_status = (call);                     \
    if (mt_lt_status != CUBLAS_STATUS_SUCCESS) return mt_lt_status; \
  } while (0)

template <typename T>
cublasStatus_t SetOp(cublasLtMatmulDesc_t op, cublasLtMatmulDescAttributes_t attribute,
                     const T& value) {
  return cublasLtMatmulDescSetAttribute(op, attribute, &value, sizeof(value));
}

cublasStatus_t DescribeOperation(const LtMatmulArgs& g, Descriptors* s) {
  MT_LT_TRY(cublasLtMatmulDescCreate(&s->op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t ta = g.transpose_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t tb = g.transpose_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  MT_LT_TRY(SetOp(s->op, CUBLASLT_MATMUL_DESC_TRANSA, ta));
  MT_LT_TRY(SetOp(s->op, CUBLASLT_MATMUL_DESC_TRANSB, tb));
  MT_LT_TRY(SetOp(s->op, CUBLASLT_MATMUL_DESC_EPILOGUE, EpilogueOf(g.epilogue)));
  if (g.scale != nullptr) {
    MT_LT_TRY(SetOp(s->op, CUBLASLT_MATMUL_DESC_POINTER_MODE, CUBLASLT_POINTER_MODE_DEVICE));
  }
  switch (g.epilogue) {
    case LtEpilogue::kBias:
    case LtEpilogue::kGeluBias:
      MT_LT_TRY(SetOp(s->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, g.bias));
      break;
    case LtEpilogue::kGeluAuxBias:
      MT_LT_TRY(SetOp(s->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, g.bias));
      MT_LT_TRY(SetOp(s->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, g.aux));
      MT_LT_TRY(SetOp(s->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, g.ldaux));
      break;
    case LtEpilogue::kDGeluBGrad:
      MT_LT_TRY(SetOp(s->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, g.bias_grad));
      [[fallthrough]];
    case LtEpilogue::kDGelu:
      MT_LT_TRY(SetOp(s->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, g.aux));
      MT_LT_TRY(SetOp(s->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, g.ldaux));
      break;
    case LtEpilogue::kBGradB:
      MT_LT_TRY(SetOp(s->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, g.bias_grad));
      break;
    default:
      break;
  }
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t DescribeMatrices(const LtMatmulArgs& g, Descriptors* s) {
  const cudaDataType_t t = DataTypeOf(g.kind);
  // Stored shapes: op(A) is m x k, so A is k x m when transposed.
  MT_LT_TRY(cublasLtMatrixLayoutCreate(&s->a, t, g.transpose_a ? g.k : g.m,
                                       g.transpose_a ? g.m : g.k, g.lda));
  MT_LT_TRY(cublasLtMatrixLayoutCreate(&s->b, t, g.transpose_b ? g.n : g.k,
                                       g.transpose_b ? g.k : g.n, g.ldb));
  MT_LT_TRY(cublasLtMatrixLayoutCreate(&s->d, t, g.m, g.n, g.ldd));
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t DescribePreference(const LtMatmulArgs& g, size_t workspace_bytes, Descriptors* s) {
  MT_LT_TRY(cublasLtMatmulPreferenceCreate(&s->preference));
  const uint64_t bytes = workspace_bytes;
  MT_LT_TRY(cublasLtMatmulPreferenceSetAttribute(
      s->preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &bytes, sizeof(bytes)));
  const struct {
    cublasLtMatmulPreferenceAttributes_t attribute;
    const void* pointer;
  } alignments[] = {{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, g.a},
                    {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, g.b},
                    {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, g.d},
                    {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, g.d}};
  for (const auto& a : alignments) {
    const uint32_t value = AlignmentOf(a.pointer);
    MT_LT_TRY(
        cublasLtMatmulPreferenceSetAttribute(s->preference, a.attribute, &value, sizeof(value)));
  }
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t Describe(const LtMatmulArgs& g, size_t workspace_bytes, Descriptors* s) {
  MT_LT_TRY(DescribeOperation(g, s));
  MT_LT_TRY(DescribeMatrices(g, s));
  return DescribePreference(g, workspace_bytes, s);
}

// cublasLtMatmul's alpha and beta: host constants 1 and 0, or the caller's device {s, 0}.
struct Scalars {
  explicit Scalars(const LtMatmulArgs& g)
      : alpha(g.scale != nullptr ? static_cast<const void*>(g.scale) : &one),
        beta(g.scale != nullptr ? static_cast<const void*>(g.scale + 1) : &zero) {}
  Scalars(const Scalars&) = delete;  // alpha and beta may point at its own members
  Scalars& operator=(const Scalars&) = delete;
  float one = 1.0f, zero = 0.0f;
  const void* alpha;
  const void* beta;
};

// The median milliseconds of `repeats` calls of `algo` after one warm-up call, each call timed
// alone (CUDA events on `stream`, which is synchronised) after `flush_bytes` of `flush` are
// written (none where `flush` is null); -1 where cuBLASLt refuses the algorithm.
float TimeAlgorithm(cublasLtHandle_t handle, const LtMatmulArgs& g, const Descriptors& s,
                    const cublasLtMatmulAlgo_t& algo, void* workspace, size_t workspace_bytes,
                    cudaStream_t stream, cudaEvent_t start, cudaEvent_t stop, int repeats,
                    void* flush, size_t flush_bytes) {
  const Scalars scalars(g);
  auto run = [&] {
    return cublasLtMatmul(handle, s.op, scalars.alpha, g.a, s.a, g.b, s.b, scalars.beta, g.d, s.d,
                          g.d, s.d, &algo, workspace, workspace_bytes, stream);
  };
  if (run() != CUBLAS_STATUS_SUCCESS) return -1.0f;
  std::vector<float> times;
  for (int r = 0; r < repeats; ++r) {
    if (flush != nullptr && cudaMemsetAsync(flush, r & 0xff, flush_bytes, stream) != cudaSuccess) {
      return -1.0f;
    }
    cudaEventRecord(start, stream);
    if (run() != CUBLAS_STATUS_SUCCESS) return -1.0f;
    cudaEventRecord(stop, stream);
    float ms = -1.0f;
    if (cudaEventSynchronize(stop) != cudaSuccess ||
        cudaEventElapsedTime(&ms, start, stop) != cudaSuccess) {
      return -1.0f;
    }
    times.push_back(ms);
  }
  std::nth_element(times.begin(), times.begin() + times.size() / 2, times.end());
  return times[times.size() / 2];
}

// The heuristic's first `max_algorithms` candidates for the described problem under
// `preference` (s.preference, or one without a workspace).
cublasStatus_t Candidates(cublasLtHandle_t handle, const Descriptors& s,
                          cublasLtMatmulPreference_t preference, int max_algorithms,
                          std::vector<cublasLtMatmulHeuristicResult_t>* results) {
  results->resize(max_algorithms);
  int found = 0;
  MT_LT_TRY(cublasLtMatmulAlgoGetHeuristic(handle, s.op, s.a, s.b, s.d, s.d, preference,
                                           max_algorithms, results->data(), &found));
  results->resize(found);
  return CUBLAS_STATUS_SUCCESS;
}

// A candidate algorithm and whether it runs with the caller's workspace.
struct Candidate {
  cublasLtMatmulHeuristicResult_t result;
  bool workspace;
};

// What LtMatmul chooses among (gemm_lt_launch.h): the heuristic's first `n` with s's workspace;
// with `optional`, its first `n` that need no workspace, then those of its first `n` with the
// workspace that need it. `first_only` (nothing will be timed): the list stops at the first
// pick, so an untuned call with an optional workspace asks the heuristic once where it can.
cublasStatus_t CandidateList(cublasLtHandle_t handle, const LtMatmulArgs& g, const Descriptors& s,
                             bool optional, int n, bool first_only, std::vector<Candidate>* list) {
  list->clear();
  std::vector<cublasLtMatmulHeuristicResult_t> results;
  if (optional) {
    Descriptors none;  // only its preference: no workspace
    MT_LT_TRY(DescribePreference(g, 0, &none));
    MT_LT_TRY(Candidates(handle, s, none.preference, n, &results));
    for (const cublasLtMatmulHeuristicResult_t& r : results) list->push_back({r, false});
    if (first_only && !list->empty()) return CUBLAS_STATUS_SUCCESS;
  }
  MT_LT_TRY(Candidates(handle, s, s.preference, n, &results));
  for (const cublasLtMatmulHeuristicResult_t& r : results) {
    if (!optional || r.workspaceSize > 0) list->push_back({r, true});
  }
  return CUBLAS_STATUS_SUCCESS;
}

// Times every candidate (ms[i], -1 where cuBLASLt refuses it), each call with a cold L2 where
// the flush buffer can be had (cudaMalloc; without it, as the calls come); false when the
// events fail.
bool TimeCandidates(cublasLtHandle_t handle, const LtMatmulArgs& g, const Descriptors& s,
                    const std::vector<Candidate>& list, void* workspace, size_t workspace_bytes,
                    cudaStream_t stream, int repeats, std::vector<float>* ms) {
  cudaEvent_t start = nullptr, stop = nullptr;
  if (cudaEventCreate(&start) != cudaSuccess || cudaEventCreate(&stop) != cudaSuccess) {
    if (start != nullptr) cudaEventDestroy(start);
    return false;
  }
  size_t flush_bytes = L2FlushBytes();
  void* flush = nullptr;
  if (flush_bytes > 0 && cudaMalloc(&flush, flush_bytes) != cudaSuccess) {
    cudaGetLastError();  // out of memory: time without the flush
    flush = nullptr;
  }
  ms->clear();
  for (const Candidate& c : list) {
    ms->push_back(c.result.state != CUBLAS_STATUS_SUCCESS
                      ? -1.0f
                      : TimeAlgorithm(handle, g, s, c.result.algo,
                                      c.workspace ? workspace : nullptr,
                                      c.workspace ? workspace_bytes : 0, stream, start, stop,
                                      repeats, flush, flush_bytes));
  }
  if (flush != nullptr) {
    cudaStreamSynchronize(stream);
    cudaFree(flush);
  }
  cudaEventDestroy(stop);
  cudaEventDestroy(start);
  return true;
}

// What tells two problems apart for the table: everything the descriptors are made of.
LtProblemKey KeyOf(const LtMatmulArgs& g, size_t workspace_bytes, bool workspace_optional) {
  int device = -1;
  cudaGetDevice(&device);
  return {device,
          static_cast<int64_t>(g.kind),
          g.transpose_a,
          g.transpose_b,
          g.m,
          g.n,
          g.k,
          g.lda,
          g.ldb,
          g.ldd,
          static_cast<int64_t>(g.epilogue),
          g.ldaux,
          AlignmentOf(g.a),
          AlignmentOf(g.b),
          AlignmentOf(g.d),
          static_cast<int64_t>(workspace_bytes),
          g.scale != nullptr,
          workspace_optional};
}

static_assert(sizeof(cublasLtMatmulAlgo_t) == sizeof(LtAlgorithmBytes),
              "LtAlgorithmBytes holds a cublasLtMatmulAlgo_t");

LtAlgorithmBytes BytesOf(const cublasLtMatmulAlgo_t& algo) {
  LtAlgorithmBytes bytes;
  std::memcpy(bytes.data(), &algo, sizeof(algo));
  return bytes;
}

cublasLtMatmulAlgo_t AlgoOf(const LtAlgorithmBytes& bytes) {
  cublasLtMatmulAlgo_t algo;
  std::memcpy(&algo, bytes.data(), sizeof(algo));
  return algo;
}

// The fastest of the timed candidates, or the first pick where none beats it by kLtTuneMargin
// (so timing noise does not move a problem off the heuristic's choice).
size_t Fastest(const std::vector<float>& ms) {
  size_t best = 0;
  for (size_t i = 1; i < ms.size(); ++i) {
    if (ms[i] > 0 && ms[i] < ms[best]) best = i;
  }
  return ms[best] < (1.0f - kLtTuneMargin) * ms[0] ? best : 0;
}

// The algorithm LtMatmul runs and whether with the workspace (*found false: cuBLASLt offers
// none): the table's for a problem it holds; else, outside a CUDA graph capture, the fastest of
// CandidateList's (a memset node's cost added to those that need an optional workspace),
// remembered; else (no table, or capturing) the first of them.
cublasStatus_t ChooseAlgorithm(cublasLtHandle_t handle, const LtMatmulArgs& g, const Descriptors& s,
                               void* workspace, size_t workspace_bytes, bool optional,
                               cudaStream_t stream, LtTuning* tuning, int candidates,
                               LtChoice* choice, bool* found) {
  const LtProblemKey key = KeyOf(g, workspace_bytes, optional);
  if (tuning != nullptr && tuning->Find(key, choice)) {
    *found = true;
    return CUBLAS_STATUS_SUCCESS;
  }
  const bool tune = tuning != nullptr && !StreamCapturing(stream);
  std::vector<Candidate> list;
  MT_LT_TRY(CandidateList(handle, g, s, optional, tune ? std::max(candidates, 1) : 1,
                          /*first_only=*/!tune, &list));
  *found = !list.empty();
  if (!*found) return CUBLAS_STATUS_SUCCESS;
  size_t pick = 0;
  std::vector<float> ms;
  if (tune && list.size() > 1 &&
      TimeCandidates(handle, g, s, list, workspace, workspace_bytes, stream, kLtTuneRepeats, &ms) &&
      ms[0] > 0) {
    for (size_t i = 0; i < ms.size(); ++i) {
      if (optional && list[i].workspace && ms[i] > 0) ms[i] += kLtMemsetNodeMs;
    }
    pick = Fastest(ms);
  }
  choice->algorithm = BytesOf(list[pick].result.algo);
  choice->workspace = list[pick].workspace;
  if (tune) tuning->Remember(key, *choice, pick != 0);
  return CUBLAS_STATUS_SUCCESS;
}

}  // namespace

size_t L2FlushBytes() {
  int device = 0, l2 = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, device) != cudaSuccess || l2 <= 0) {
    return 0;
  }
  return 2 * static_cast<size_t>(l2);
}

bool StreamCapturing(cudaStream_t stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  return cudaStreamIsCapturing(stream, &status) != cudaSuccess ||
         status != cudaStreamCaptureStatusNone;
}

int LtTimeAlgorithms(const LtMatmulArgs& g, void* lt_handle, void* workspace,
                     size_t workspace_bytes, cudaStream_t stream, int max_algorithms, int repeats,
                     std::vector<float>* ms) {
  ms->clear();
  if (max_algorithms < 1 || repeats < 1) return CUBLAS_STATUS_INVALID_VALUE;
  auto handle = static_cast<cublasLtHandle_t>(lt_handle);
  Descriptors s;
  MT_LT_TRY(Describe(g, workspace_bytes, &s));
  std::vector<Candidate> list;
  MT_LT_TRY(
      CandidateList(handle, g, s, /*optional=*/false, max_algorithms, /*first_only=*/false, &list));
  if (list.empty()) return kLtNoAlgorithm;
  if (!TimeCandidates(handle, g, s, list, workspace, workspace_bytes, stream, repeats, ms)) {
    return kLtCudaError;
  }
  return 0;
}

int LtMatmul(const LtMatmulArgs& g, void* lt_handle, void* workspace, size_t workspace_bytes,
             cudaStream_t stream, LtTuning* tuning, int candidates, bool workspace_optional) {
  auto handle = static_cast<cublasLtHandle_t>(lt_handle);
  Descriptors s;
  MT_LT_TRY(Describe(g, workspace_bytes, &s));
  LtChoice choice;
  bool found = false;
  MT_LT_TRY(ChooseAlgorithm(handle, g, s, workspace, workspace_bytes, workspace_optional, stream,
                            tuning, candidates, &choice, &found));
  if (!found) return kLtNoAlgorithm;
  const cublasLtMatmulAlgo_t algo = AlgoOf(choice.algorithm);
  const Scalars scalars(g);
  MT_LT_TRY(cublasLtMatmul(handle, s.op, scalars.alpha, g.a, s.a, g.b, s.b, scalars.beta, g.d, s.d,
                           g.d, s.d, &algo, choice.workspace ? workspace : nullptr,
                           choice.workspace ? workspace_bytes : 0, stream));
  return 0;
}

const char* LtStatusName(int status) {
  switch (status) {
    case 0:
      return "CUBLAS_STATUS_SUCCESS";
    case kLtNoAlgorithm:
      return "no cuBLASLt algorithm for this problem";
    case kLtCudaError:
      return "a CUDA runtime error (timing events)";
    case CUBLAS_STATUS_NOT_INITIALIZED:
      return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED:
      return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE:
      return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH:
      return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_EXECUTION_FAILED:
      return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR:
      return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return "CUBLAS_STATUS_NOT_SUPPORTED";
    default:
      return "a cuBLAS error";
  }
}

#undef MT_LT_TRY

}  // namespace mt::kernels
