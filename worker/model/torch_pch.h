// Precompiled header of the LibTorch targets (DESIGN.md §8.12): the heavy LibTorch headers
// parsed once per PCH instead of once per file. Kept to what the model and engine use: a
// bigger PCH (all of <torch/torch.h>) costs more to load in every file than it saves.
// Never include it directly.
#ifndef MT_WORKER_MODEL_TORCH_PCH_H_
#define MT_WORKER_MODEL_TORCH_PCH_H_

#include <ATen/ATen.h>
#include <torch/autograd.h>
#include <torch/nn/functional.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>
#include <torch/types.h>
#include <torch/utils.h>
#include <torch/version.h>

#endif  // MT_WORKER_MODEL_TORCH_PCH_H_
