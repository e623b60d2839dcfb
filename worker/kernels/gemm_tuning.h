// How the kernels' cuBLASLt GEMMs (tuned_mm.h) run: whether with tuned algorithms
// (gemm_lt_launch.h: each problem's candidates timed once a process and the fastest kept) or the
// heuristic's first pick, how many of the heuristic's candidates the tuning times, and whether
// every GEMM gets cuBLASLt's workspace. Process-wide settings, as LibTorch's cuDNN benchmark flag
// is: mt-train's --no-gemm-tuning, --gemm-tune-candidates and --gemm-workspace
// (engine::TrainerOptions, which Trainer::Create applies) set them. By default tuning on, with
// kDefaultGemmTuneCandidates, and the workspace optional where it can be (below); no effect
// without CUDA. No LibTorch in this header. Thread-safe.
#ifndef MT_WORKER_KERNELS_GEMM_TUNING_H_
#define MT_WORKER_KERNELS_GEMM_TUNING_H_

namespace mt::kernels {

// How many candidates a problem's tuning times by default, and the most it may be asked to. On
// an H100, for every GEMM of the engine bench's three sizes, the fastest of 32 candidates was
// among the first 8, and 32 changed no step time (bench/RESULTS.md, 2026-12-05).
inline constexpr int kDefaultGemmTuneCandidates = 8;
inline constexpr int kMaxGemmTuneCandidates = 64;

void SetGemmTuning(bool on);
bool GemmTuning();

// `candidates` is clamped to [1, kMaxGemmTuneCandidates] (callers check their users' values
// first). Problems already tuned keep their algorithm.
void SetGemmTuneCandidates(int candidates);
int GemmTuneCandidates();

// Off (the default): for the plain products and the forward epilogues (bias, GELU) the
// workspace is optional: the tuning times cuBLASLt's candidates that need none beside those that
// need it, charging each of the latter a memset node's cost (kLtMemsetNodeMs), and the first
// pick, untuned, is one that needs none. The gradient epilogues (d GELU, bias gradients) always
// get the workspace, without which cuBLASLt finishes them in a slow kernel of its own. On Hopper
// the algorithms cuBLASLt prefers with a workspace (its dynamically scheduled kernels) have it
// zero part of the workspace with a memset before every call: in a captured step each is a
// graph node the GPU idles around for ~5 us, ~190 of them in a GPT-2 350M step; their
// statically scheduled twins, which it offers without a workspace, mostly ran as fast or faster
// (bench/RESULTS.md, 2026-12-06). On: every problem with the workspace, as cuBLASLt prefers.
// Problems already tuned keep their choice (the setting is part of a problem's key).
void SetGemmWorkspace(bool on);
bool GemmWorkspace();

}  // namespace mt::kernels

#endif  // MT_WORKER_KERNELS_GEMM_TUNING_H_
