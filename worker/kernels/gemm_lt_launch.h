// One cuBLASLt matmul with a fused epilogue (bias, GELU and their gradients), for the CUDA side:
// plain pointers, no LibTorch. Column-major, cuBLAS's convention: D [m x n] = epilogue(op(A)
// op(B)) with op(A) m x k and op(B) k x n; a row-major [r, c] tensor is a column-major c x r
// matrix with leading dimension c. A, B, D, the bias (or its gradient) and the aux matrix are
// all of one FloatKind; products accumulate in fp32 (no TF32 for fp32 inputs).
#ifndef MT_WORKER_KERNELS_GEMM_LT_LAUNCH_H_
#define MT_WORKER_KERNELS_GEMM_LT_LAUNCH_H_

#include <cuda_runtime_api.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <vector>

#include "worker/kernels/float_kind.h"
#include "worker/kernels/gemm_tuning.h"

namespace mt::kernels {

enum class LtEpilogue {
  kNone,
  kBias,         // D = A B + bias            (bias [m], read)
  kGeluBias,     // D = gelu(A B + bias)      (tanh GELU)
  kGeluAuxBias,  // D = gelu(A B + bias), aux = A B + bias (written: what backward needs)
  kDGelu,        // D = (A B) * gelu'(aux)    (aux read)
  kDGeluBGrad,   // as kDGelu, and bias_grad [m] = D summed over its n columns
  kBGradB,       // D = A B, and bias_grad [n] = op(B) summed over its k rows (a weight
                 // gradient GEMM whose B is the output gradient: the layer's bias gradient)
};

struct LtMatmulArgs {
  FloatKind kind = FloatKind::kFloat32;
  bool transpose_a = false;
  bool transpose_b = false;
  int64_t m = 0, n = 0, k = 0;
  const void* a = nullptr;
  int64_t lda = 0;
  const void* b = nullptr;
  int64_t ldb = 0;
  void* d = nullptr;
  int64_t ldd = 0;
  LtEpilogue epilogue = LtEpilogue::kNone;
  const void* bias = nullptr;  // kBias, kGeluBias, kGeluAuxBias
  void* bias_grad = nullptr;   // kDGeluBGrad, kBGradB
  void* aux = nullptr;         // kGeluAuxBias (written), kDGelu / kDGeluBGrad (read): m x n
  int64_t ldaux = 0;           // a multiple of 8
  // Null: D = A B. Else device memory holding two floats {s, 0}: D = s (A B), the scale applied
  // in fp32 before the epilogue and the rounding to D's type (cuBLASLt's alpha and beta read
  // from the device, so that a scale the GPU computed needs no host sync and no pass of its own).
  const float* scale = nullptr;
};

// A problem as LtTuning knows it: the device and everything LtMatmul's descriptors are made of
// (kind, transposes, m, n, k, leading dimensions, epilogue, the buffers' alignments, workspace,
// whether the scale is read from the device), and whether the workspace was optional.
using LtProblemKey = std::array<int64_t, 18>;
// A cuBLASLt algorithm (cublasLtMatmulAlgo_t) as its 64 opaque bytes.
using LtAlgorithmBytes = std::array<uint64_t, 8>;

// Tuning: the first time LtMatmul meets a problem outside a CUDA graph capture, it times the
// first `candidates` algorithms cuBLASLt's heuristic offers (kDefaultGemmTuneCandidates unless
// the caller says otherwise, gemm_tuning.h; the median of kLtTuneRepeats calls each after one
// warm-up, each call timed alone after twice the L2's size is written, so
// that its operands come from memory as in the step; on the caller's stream, which it
// synchronises) and keeps the fastest where it beats the heuristic's first pick by
// kLtTuneMargin, else the first pick. Every later call of
// that problem runs the kept algorithm; a capture runs the kept one, or the first pick for a
// problem not met before. On an H200 the fastest candidates timed alone take ~5% off a GPT
// step's GEMMs (bench/engine/gemm_tune_bench); in the training step the tuning measured +0.7%
// at 124M and nothing measurable at 350M and 1.3B (bench/RESULTS.md, 2026-12-04). Results
// depend on the algorithm, so a problem's bits are fixed within a process, not between
// processes.
inline constexpr int kLtTuneRepeats = 5;
inline constexpr float kLtTuneMargin = 0.02f;

// What a captured step loses to a memset node: the GPU idles 2-3 us on either side of one
// (bench/RESULTS.md, 2026-12-06). Where the workspace is optional, the tuning adds it to the time
// of a candidate that needs the workspace (cuBLASLt zeroes part of it before such a call).
inline constexpr float kLtMemsetNodeMs = 0.005f;

// An algorithm LtMatmul chose, and whether it runs with the caller's workspace.
struct LtChoice {
  LtAlgorithmBytes algorithm{};
  bool workspace = true;
};

// The algorithms LtMatmul chose, one per problem. Thread-safe.
class LtTuning {
 public:
  bool Find(const LtProblemKey& key, LtChoice* choice) const {
    std::lock_guard<std::mutex> lock(mu_);
    const auto it = choices_.find(key);
    if (it == choices_.end()) return false;
    *choice = it->second;
    return true;
  }
  // The first choice remembered for a key stays. `tuned_away`: it is not the first pick.
  void Remember(const LtProblemKey& key, const LtChoice& choice, bool tuned_away) {
    std::lock_guard<std::mutex> lock(mu_);
    if (choices_.emplace(key, choice).second && tuned_away) ++tuned_away_;
  }
  // Problems remembered, and how many of them run another algorithm than the first pick.
  size_t size() const {
    std::lock_guard<std::mutex> lock(mu_);
    return choices_.size();
  }
  size_t tuned_away() const {
    std::lock_guard<std::mutex> lock(mu_);
    return tuned_away_;
  }
  // How many of them run with the workspace.
  size_t with_workspace() const {
    std::lock_guard<std::mutex> lock(mu_);
    size_t n = 0;
    for (const auto& [key, choice] : choices_) n += choice.workspace;
    return n;
  }

 private:
  mutable std::mutex mu_;
  std::map<LtProblemKey, LtChoice> choices_;
  size_t tuned_away_ = 0;
};

// Queues the matmul on `stream` with the cuBLASLt handle `lt_handle` (a cublasLtHandle_t) and
// `workspace` (device memory of `workspace_bytes`), with `tuning`'s algorithm for the problem
// (tuning it first over the heuristic's first `candidates`, above, where the table lacks it), or
// the heuristic's first pick where `tuning` is null. With `workspace_optional`, the candidates
// are the heuristic's first `candidates` that need no workspace, then its first `candidates`
// with the workspace that need it (each timed with kLtMemsetNodeMs added); the first pick is the
// first that needs none (or, where none does, the first that needs it).
// Returns 0 when queued, else the cublasStatus_t; kLtNoAlgorithm when cuBLASLt offers no
// algorithm for this problem (the caller may then take another path: nothing was queued).
inline constexpr int kLtNoAlgorithm = -1;
int LtMatmul(const LtMatmulArgs& args, void* lt_handle, void* workspace, size_t workspace_bytes,
             cudaStream_t stream, LtTuning* tuning = nullptr,
             int candidates = kDefaultGemmTuneCandidates, bool workspace_optional = false);

// Bytes to write between two timed calls so that each call starts with its operands out of the
// L2, as in a training step, where the layer's other kernels have been through the cache since
// the operands were last read: twice the current device's L2 (H200: 2 x 50 MB); 0 where it is
// unknown. Timed back to back instead, a candidate ran with its operands in the L2 (the 1.3B
// GPT's weight-gradient operands fit), and a pick that won there lost in the step: 10.27 ms
// against the first pick's 8.91 for 24 calls of the 1.3B step (bench/RESULTS.md, 2026-12-05).
// The GEMM tuning's and mlp_gelu_choice.h's timings use it.
size_t L2FlushBytes();

// Whether `stream` is capturing a CUDA graph (or cannot say): no timing may run on it then.
bool StreamCapturing(cudaStream_t stream);

// Times the first `max_algorithms` algorithms cuBLASLt's heuristic offers for the problem, in
// the heuristic's order (the first is the one LtMatmul runs), as the tuning does: ms[i] is the
// median milliseconds of `repeats` calls after one warm-up, each with a cold L2, -1 where
// cuBLASLt refuses algorithm i. Every call writes D
// (and the epilogue's outputs) as LtMatmul would; `stream` is synchronised. Returns 0, a
// cublasStatus_t, kLtNoAlgorithm, or kLtCudaError when the timing events fail. For the
// benchmarks: not to be called while `stream` is being captured into a CUDA graph.
inline constexpr int kLtCudaError = -2;
int LtTimeAlgorithms(const LtMatmulArgs& args, void* lt_handle, void* workspace,
                     size_t workspace_bytes, cudaStream_t stream, int max_algorithms, int repeats,
                     std::vector<float>* ms);

// A name for LtMatmul's status (e.g. "CUBLAS_STATUS_NOT_SUPPORTED").
const char* LtStatusName(int status);

}  // namespace mt::kernels

#endif  // MT_WORKER_KERNELS_GEMM_LT_LAUNCH_H_
