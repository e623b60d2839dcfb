// The chosen tokens of a decode step, read on the host while the device runs the next step
// (issue #17). Reading them with a plain `.to(kCPU)` waits for everything enqueued so far; done
// after the next step is enqueued, that is the next step too, and done before, the device idles
// while the host streams the text and enqueues the next step (15 to 33 microseconds a token,
// 2.6% of GPT-2 1.3B's at batch 1 and 5% of 124M's on an H200; bench/RESULTS.md, 2026-12-03).
// Enqueue copies the tokens into pinned host memory behind the work enqueued so far and records
// an event; the caller then enqueues the next step and Wait blocks on that event only.
//
// On the CPU (or a build without CUDA) Enqueue copies at once and Wait returns the copy.
// Thread-compatible; one device.
#ifndef MT_WORKER_GENERATE_TOKEN_READBACK_H_
#define MT_WORKER_GENERATE_TOKEN_READBACK_H_

#include <torch/types.h>

#include <cstdint>
#include <memory>

namespace mt::generate {

class TokenReadback {
 public:
  // For `n` tokens (int64) on `device`.
  TokenReadback(int64_t n, const torch::Device& device);
  ~TokenReadback();
  TokenReadback(const TokenReadback&) = delete;
  TokenReadback& operator=(const TokenReadback&) = delete;

  // Starts copying `tokens` ([n] int64 on the device) to the host, behind the work enqueued on
  // the current stream. Call Wait before the next Enqueue.
  void Enqueue(const torch::Tensor& tokens);

  // The n tokens of the last Enqueue, once copied; valid until the next Enqueue.
  const int64_t* Wait();

 private:
  struct Event;  // the CUDA event (token_readback.cc; empty without CUDA)

  torch::Tensor host_;  // [n] int64, pinned where the tokens are on a CUDA device
  std::unique_ptr<Event> event_;
};

}  // namespace mt::generate

#endif  // MT_WORKER_GENERATE_TOKEN_READBACK_H_
