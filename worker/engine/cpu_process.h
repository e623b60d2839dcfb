// The process-wide settings of a process that trains or evaluates on the CPU (a CPU rank, or
// `mt-worker train --device cpu`). Called once, by the binary that owns the process, before
// the model is built; the engine's libraries never change process-wide state themselves.
#ifndef MT_WORKER_ENGINE_CPU_PROCESS_H_
#define MT_WORKER_ENGINE_CPU_PROCESS_H_

namespace mt::engine {

// threads > 0: LibTorch's intra-op pool takes that many threads (a CPU rank passes its slot's
// cores; OpenBLAS's pool is bounded by the daemon's OPENBLAS_NUM_THREADS, which OpenBLAS
// reads at load). And, whatever `threads`: a step's freed tensors stay in the heap for the
// next step. By default malloc maps each block above a moving threshold (128 KiB at first)
// afresh and returns the heap's top once 2x that threshold is free, so a tiny GPT's step
// (logits and their gradient of 6-13 MiB over a 50,304-token vocabulary) faulted its pages
// in anew every step: 2.4x the step's time, most of it in the kernel (bench/RESULTS.md,
// "CI time"). The heap's footprint then stays at the step's peak, as a GPU's caching
// allocator's does.
void ConfigureCpuProcess(int threads);

}  // namespace mt::engine

#endif  // MT_WORKER_ENGINE_CPU_PROCESS_H_
