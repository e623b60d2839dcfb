#include "common/spec/defaults.h"

#include <cstdint>
#include <limits>

#include "absl/strings/str_cat.h"

namespace mt::spec {
namespace {

void DefaultDataPaths(google::protobuf::RepeatedPtrField<mt::v1::DataPath>* paths) {
  // "1 when a single path is given".
  if (paths->size() == 1 && paths->Get(0).weight() == 0) paths->Mutable(0)->set_weight(1.0);
}

// Data-parallel size when the spec fixes it, else 0.
int64_t KnownDataParallelSize(const mt::v1::ParallelSpec& p) {
  if (p.data_parallel_size() > 0) return p.data_parallel_size();
  const int64_t model_parallel = static_cast<int64_t>(p.tensor_model_parallel_size()) *
                                 p.context_parallel_size() * p.pipeline_model_parallel_size();
  if (p.world_size() > 0 && model_parallel > 0 && p.world_size() % model_parallel == 0) {
    return p.world_size() / model_parallel;
  }
  return 0;
}

bool FitsInt32(int64_t v) {
  return v >= std::numeric_limits<int32_t>::min() && v <= std::numeric_limits<int32_t>::max();
}

}  // namespace

void ApplyDefaults(mt::v1::JobSpec* spec) {
  if (spec->name().empty()) spec->set_name(kDefaultJobName);

  mt::v1::ModelSpec* m = spec->mutable_model();
  if (m->ffn_hidden_size() == 0 && m->hidden_size() > 0 &&
      FitsInt32(4 * static_cast<int64_t>(m->hidden_size()))) {
    m->set_ffn_hidden_size(4 * m->hidden_size());
  }
  if (m->kv_channels() == 0 && m->hidden_size() > 0 && m->num_attention_heads() > 0 &&
      m->hidden_size() % m->num_attention_heads() == 0) {
    m->set_kv_channels(m->hidden_size() / m->num_attention_heads());
  }
  if (m->max_position_embeddings() == 0) m->set_max_position_embeddings(m->seq_length());
  if (!m->has_make_vocab_size_divisible_by()) {
    m->set_make_vocab_size_divisible_by(kDefaultMakeVocabSizeDivisibleBy);
  }
  if (!m->has_hidden_dropout()) m->set_hidden_dropout(kDefaultDropout);
  if (!m->has_attention_dropout()) m->set_attention_dropout(kDefaultDropout);
  if (!m->has_init_method_std()) m->set_init_method_std(kDefaultInitMethodStd);
  if (!m->has_layernorm_epsilon()) m->set_layernorm_epsilon(kDefaultLayernormEpsilon);

  mt::v1::ParallelSpec* p = spec->mutable_parallel();
  if (p->tensor_model_parallel_size() == 0) p->set_tensor_model_parallel_size(1);
  if (p->pipeline_model_parallel_size() == 0) p->set_pipeline_model_parallel_size(1);
  if (p->context_parallel_size() == 0) p->set_context_parallel_size(1);
  if (p->ddp_bucket_size() == 0) p->set_ddp_bucket_size(kDefaultDdpBucketSize);

  mt::v1::TrainingSpec* t = spec->mutable_training();
  if (t->global_batch_size() == 0 && t->micro_batch_size() > 0) {
    const int64_t dp = KnownDataParallelSize(*p);
    if (dp > 0 && FitsInt32(dp * t->micro_batch_size())) {
      t->set_global_batch_size(static_cast<int32_t>(dp * t->micro_batch_size()));
    }
  }
  if (t->lr_decay_iters() == 0 && t->train_iters() > 0) t->set_lr_decay_iters(t->train_iters());
  if (t->lr_decay_samples() == 0 && t->train_samples() > 0) {
    t->set_lr_decay_samples(t->train_samples());
  }
  if (t->lr_decay_style() == mt::v1::LR_DECAY_STYLE_UNSPECIFIED) {
    t->set_lr_decay_style(mt::v1::LR_DECAY_STYLE_LINEAR);
  }
  if (t->optimizer() == mt::v1::OPTIMIZER_UNSPECIFIED) t->set_optimizer(mt::v1::OPTIMIZER_ADAM);
  if (!t->has_weight_decay()) t->set_weight_decay(kDefaultWeightDecay);
  if (!t->has_adam_beta1()) t->set_adam_beta1(kDefaultAdamBeta1);
  if (!t->has_adam_beta2()) t->set_adam_beta2(kDefaultAdamBeta2);
  if (!t->has_adam_eps()) t->set_adam_eps(kDefaultAdamEps);
  if (!t->has_sgd_momentum()) t->set_sgd_momentum(kDefaultSgdMomentum);
  if (!t->has_clip_grad()) t->set_clip_grad(kDefaultClipGrad);
  if (t->precision() == mt::v1::PRECISION_UNSPECIFIED) t->set_precision(mt::v1::PRECISION_FP32);
  if (!t->has_initial_loss_scale()) t->set_initial_loss_scale(kDefaultInitialLossScale);
  if (!t->has_min_loss_scale()) t->set_min_loss_scale(kDefaultMinLossScale);
  if (!t->has_loss_scale_window()) t->set_loss_scale_window(kDefaultLossScaleWindow);
  if (!t->has_hysteresis()) t->set_hysteresis(kDefaultHysteresis);
  if (t->recompute_granularity() == mt::v1::RECOMPUTE_GRANULARITY_UNSPECIFIED) {
    t->set_recompute_granularity(mt::v1::RECOMPUTE_GRANULARITY_NONE);
  }
  if (t->recompute_method() == mt::v1::RECOMPUTE_METHOD_UNSPECIFIED) {
    t->set_recompute_method(mt::v1::RECOMPUTE_METHOD_UNIFORM);
  }
  if (t->recompute_num_layers() == 0) t->set_recompute_num_layers(1);
  if (!t->has_seed()) t->set_seed(kDefaultSeed);

  mt::v1::DataSpec* d = spec->mutable_data();
  DefaultDataPaths(d->mutable_data_path());
  DefaultDataPaths(d->mutable_train_data_path());
  DefaultDataPaths(d->mutable_valid_data_path());
  DefaultDataPaths(d->mutable_test_data_path());
  if (d->split().empty()) d->set_split(kDefaultSplit);
  if (d->tokenizer().type() == mt::v1::TOKENIZER_TYPE_UNSPECIFIED) {
    d->mutable_tokenizer()->set_type(mt::v1::TOKENIZER_TYPE_GPT2_BPE);
  }
  if (!d->has_num_workers()) d->set_num_workers(kDefaultNumWorkers);

  spec->mutable_checkpoint()->mutable_retention();

  mt::v1::EvaluationSpec* e = spec->mutable_evaluation();
  if (!e->has_eval_interval()) e->set_eval_interval(kDefaultEvalInterval);
  if (!e->has_eval_iters()) e->set_eval_iters(kDefaultEvalIters);

  mt::v1::LoggingSpec* l = spec->mutable_logging();
  if (!l->has_log_interval()) l->set_log_interval(kDefaultLogInterval);

  mt::v1::RestartPolicy* r = spec->mutable_restart();
  if (!r->has_max_restarts()) r->set_max_restarts(kDefaultMaxRestarts);
  if (!r->has_hang_timeout_floor_seconds()) {
    r->set_hang_timeout_floor_seconds(kDefaultHangTimeoutFloorSeconds);
  }
  if (!r->has_hang_step_multiplier()) r->set_hang_step_multiplier(kDefaultHangStepMultiplier);
  if (!r->has_save_load_timeout_seconds()) {
    r->set_save_load_timeout_seconds(kDefaultSaveLoadTimeoutSeconds);
  }
  if (!r->has_distributed_timeout_minutes()) {
    r->set_distributed_timeout_minutes(kDefaultDistributedTimeoutMinutes);
  }
  if (!r->has_straggler_threshold()) r->set_straggler_threshold(kDefaultStragglerThreshold);
  if (!r->has_straggler_window_steps()) r->set_straggler_window_steps(kDefaultStragglerWindowSteps);

  mt::v1::ResourceSpec* res = spec->mutable_resources();
  if (res->device() == mt::v1::DEVICE_KIND_UNSPECIFIED) res->set_device(mt::v1::DEVICE_KIND_AUTO);
}

absl::Status ResolveForLayout(mt::v1::JobSpec* spec, int data_parallel_size) {
  if (data_parallel_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("data-parallel size ", data_parallel_size, " must be at least 1"));
  }
  mt::v1::ParallelSpec* p = spec->mutable_parallel();
  if (p->data_parallel_size() > 0 && p->data_parallel_size() != data_parallel_size) {
    return absl::InvalidArgumentError(absl::StrCat("parallel.data_parallel_size is ",
                                                   p->data_parallel_size(), " but the layout has ",
                                                   data_parallel_size));
  }
  mt::v1::TrainingSpec* t = spec->mutable_training();
  if (t->global_batch_size() == 0) {
    const int64_t global = static_cast<int64_t>(t->micro_batch_size()) * data_parallel_size;
    if (!FitsInt32(global)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "training.micro_batch_size ", t->micro_batch_size(), " * data-parallel size ",
          data_parallel_size, " overflows training.global_batch_size"));
    }
    t->set_global_batch_size(static_cast<int32_t>(global));
  }
  return absl::OkStatus();
}

}  // namespace mt::spec
