// How the static decode step (decode_step.h) runs where there is a choice: the default is the
// fastest measured (bench/RESULTS.md); the other settings are there to compare against it in
// one run (decode_bench). No LibTorch in this header.
#ifndef MT_WORKER_GENERATE_DECODE_STEP_OPTIONS_H_
#define MT_WORKER_GENERATE_DECODE_STEP_OPTIONS_H_

namespace mt::generate {

struct DecodeStepOptions {
  // On CUDA at batch 1, each LayerNorm inside the linear layer after it (kernels::NormGemv);
  // false runs the LayerNorm kernel and then the linear layer.
  bool norm_in_linear = true;
  // Greedy decoding through a DecodeGraph (decode_graph.h): the step itself chooses each row's
  // next token (the argmax, inside the CUDA graph) where the next step reads it, and advances
  // the position on the device; false chooses outside the step as sampling does, and the host
  // copies the tokens and the position in before each step.
  bool greedy_in_step = true;

  bool operator==(const DecodeStepOptions& o) const {
    return norm_in_linear == o.norm_in_linear && greedy_in_step == o.greedy_in_step;
  }
};

}  // namespace mt::generate

#endif  // MT_WORKER_GENERATE_DECODE_STEP_OPTIONS_H_
