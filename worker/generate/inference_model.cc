#include "worker/generate/inference_model.h"

#include <ATen/ATen.h>
#include <sys/stat.h>
#include <torch/cuda.h>

#include <algorithm>
#include <deque>
#include <optional>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "common/checkpoint/reshard.h"
#include "worker/checkpoint/checkpointer.h"
#include "worker/checkpoint/trainer_state.h"
#include "worker/model/gpt.h"
#include "worker/model/quantize.h"
#include "worker/model/sharding.h"

namespace mt::generate {
namespace {

model::GptConfig ConfigOf(const mt::v1::ManifestModel& m) {
  model::GptConfig c;
  c.num_layers = m.num_layers();
  c.hidden_size = m.hidden_size();
  c.num_attention_heads = m.num_attention_heads();
  c.ffn_hidden_size = m.ffn_hidden_size();
  c.kv_channels = m.kv_channels();
  c.seq_length = m.max_position_embeddings();
  c.max_position_embeddings = m.max_position_embeddings();
  c.vocab_size = m.vocab_size();
  c.layernorm_epsilon = m.layernorm_epsilon() > 0 ? m.layernorm_epsilon() : 1e-5;
  c.untie_embeddings_and_output_weights = m.untie_embeddings_and_output_weights();
  c.hidden_dropout = 0.0;
  c.attention_dropout = 0.0;
  return c.Resolve();
}

absl::StatusOr<torch::Device> ParseDevice(const std::string& name) {
  try {
    torch::Device device(name);
    if (device.is_cuda() && !torch::cuda::is_available()) {
      return absl::FailedPreconditionError(
          absl::StrCat("--device ", name, ": this machine (or this LibTorch) has no CUDA"));
    }
    if (!device.is_cuda() && !device.is_cpu()) {
      return absl::InvalidArgumentError(absl::StrCat("--device ", name, ": want cpu or cuda[:N]"));
    }
    return device;
  } catch (const c10::Error&) {
    return absl::InvalidArgumentError(
        absl::StrCat("--device \"", name, "\": want cpu or cuda[:N]"));
  }
}

absl::StatusOr<torch::ScalarType> ParseDType(const std::string& name, const torch::Device& d) {
  if (name == "auto") return d.is_cuda() ? torch::kBFloat16 : torch::kFloat;
  if (name == "fp32") return torch::kFloat;
  if (name == "bf16") return torch::kBFloat16;
  if (name == "fp16") return torch::kHalf;
  return absl::InvalidArgumentError(
      absl::StrCat("--dtype \"", name, "\": want fp32, bf16, fp16 or auto"));
}

absl::StatusOr<model::AttentionBackend> ParseAttention(const std::string& name) {
  if (name == "auto") return model::AttentionBackend::kAuto;
  if (name == "math") return model::AttentionBackend::kMath;
  if (name == "fused") return model::AttentionBackend::kFused;
  return absl::InvalidArgumentError(
      absl::StrCat("--attention \"", name, "\": want auto, math or fused"));
}

absl::StatusOr<bool> ParseQuantize(const std::string& name) {
  if (name == "none" || name.empty()) return false;
  if (name == "int8") return true;
  return absl::InvalidArgumentError(absl::StrCat("--quantize \"", name, "\": want none or int8"));
}

// A TP shard's config: the checkpoint's padded vocabulary kept (Megatron's rule gives
// `padded` itself when the multiple is padded / tp), so that the ranks split exactly the rows
// the checkpoint holds, as an eval job's ranks do (worker/train/sharded_eval.cc).
absl::Status ShardConfig(const mt::v1::ManifestModel& m, int tp, model::GptConfig& c) {
  const char* flag = "--tensor-model-parallel-size";
  if (c.num_attention_heads % tp != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, " ", tp, ": the checkpoint's ", c.num_attention_heads,
                     " attention heads do not split evenly over ", tp, " ranks"));
  }
  const int64_t padded = m.padded_vocab_size() > 0 ? m.padded_vocab_size() : c.padded_vocab_size();
  if (padded % tp != 0 || padded < c.vocab_size) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, " ", tp, ": the checkpoint's vocabulary of ", padded,
                     " rows (padded) does not split evenly over ", tp, " ranks"));
  }
  c.make_vocab_size_divisible_by = padded / tp;
  c.tensor_model_parallel_size = tp;
  return absl::OkStatus();
}

// Copies each model.<param> of `source` (assembled from any layout) into the model: the whole
// tensor, or this TP rank's slice of it.
absl::Status CopyWeights(checkpoint::TensorSource& source, model::GptModel& gpt) {
  torch::NoGradGuard no_grad;
  const model::ModelShard& shard = gpt.shard();
  for (const auto& item : gpt.named_parameters()) {
    checkpoint::SliceRequest req;
    req.shape = item.value().sizes().vec();
    if (shard.tp_size > 1) {
      req.split_dim = model::TensorParallelSplitDim(item.key());
      req.tp_rank = shard.tp_rank;
      req.tp_size = shard.tp_size;
    }
    const std::string name = "model." + item.key();
    if (!source.Has(name)) {
      return absl::NotFoundError(absl::StrCat("the checkpoint has no tensor ", name));
    }
    MT_ASSIGN_OR_RETURN(checkpoint::HostTensor t, source.Slice(name, req));
    if (t.shape != req.shape) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, ": the checkpoint gives ", checkpoint::ShapeString(t.shape),
                       ", the model has ", checkpoint::ShapeString(req.shape)));
    }
    MT_ASSIGN_OR_RETURN(c10::ScalarType type, checkpoint::ToScalarType(t.dtype));
    item.value().copy_(
        torch::from_blob(t.data.data(), req.shape, torch::TensorOptions().dtype(type)));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<InferenceModel> LoadInferenceModel(const std::string& path,
                                                  const InferenceModelOptions& options) {
  MT_ASSIGN_OR_RETURN(torch::Device device, ParseDevice(options.device));
  MT_ASSIGN_OR_RETURN(torch::ScalarType dtype, ParseDType(options.dtype, device));
  MT_ASSIGN_OR_RETURN(model::AttentionBackend attention, ParseAttention(options.attention));
  MT_ASSIGN_OR_RETURN(const bool int8, ParseQuantize(options.quantize));
  const int tp = std::max(1, options.tp.size);
  if (tp > 1 && int8) {
    return absl::InvalidArgumentError(
        "--quantize int8 generates on one rank: give --quantize none, or "
        "--tensor-model-parallel-size 1");
  }
  if (tp > 1 && (options.tp.group == nullptr || options.tp.rank < 0 || options.tp.rank >= tp)) {
    return absl::InvalidArgumentError(absl::StrCat("tensor-parallel rank ", options.tp.rank, " of ",
                                                   tp, " needs its TP group to load"));
  }
  struct stat st;
  if (path.empty() || ::stat(path.c_str(), &st) != 0) {
    return absl::NotFoundError(absl::StrCat("checkpoint \"", path,
                                            "\": no such file or directory (give a save "
                                            "directory, a checkpoint or a Hugging Face "
                                            "directory)"));
  }
  checkpoint::LoadOptions load;
  load.stage_device = "";
  load.tp_rank = tp > 1 ? options.tp.rank : 0;
  load.tp_size = tp;
  MT_ASSIGN_OR_RETURN(std::optional<checkpoint::LoadChoice> choice,
                      checkpoint::ChooseLoad(path, load));
  if (!choice.has_value()) {
    return absl::NotFoundError(
        absl::StrCat("checkpoint \"", path, "\": no checkpoint in this directory"));
  }
  MT_ASSIGN_OR_RETURN(std::unique_ptr<checkpoint::TensorSource> source,
                      checkpoint::OpenLoadSource(*choice));
  model::GptConfig config = ConfigOf(choice->manifest.model());
  config.attention_backend = attention;
  model::ModelShard shard;
  if (tp > 1) {
    MT_RETURN_IF_ERROR(ShardConfig(choice->manifest.model(), tp, config));
    shard.tp_size = tp;
    shard.tp_rank = options.tp.rank;
    shard.tp_group = options.tp.group;
  }
  model::ModelBuildOptions build;
  build.seed = 0;  // overwritten by the checkpoint's weights
  build.device = device;
  build.dtype = dtype;
  InferenceModel out;
  MT_ASSIGN_OR_RETURN(out.model, model::GptModel::Create(config, shard, build));
  try {
    MT_RETURN_IF_ERROR(CopyWeights(*source, *out.model));
    if (int8) MT_RETURN_IF_ERROR(model::QuantizeInt8Linears(*out.model));
  } catch (const c10::Error& e) {
    return absl::InternalError(
        absl::StrCat("loading ", choice->dir, ": ", e.what_without_backtrace()));
  }
  out.model->eval();
  out.dir = choice->dir;
  out.manifest = std::move(choice->manifest);
  return out;
}

}  // namespace mt::generate
