#include "common/checkpoint/hf_gpt2.h"

#include <sys/stat.h>

#include <cerrno>
#include <cmath>
#include <map>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "common/base/confine.h"
#include "common/base/errors.h"
#include "common/base/files.h"
#include "common/base/paths.h"
#include "common/base/status_macros.h"
#include "common/checkpoint/checkpoint_dir.h"
#include "common/checkpoint/file_writer.h"
#include "common/checkpoint/hf_tokenizer_files.h"
#include "common/checkpoint/reshard.h"
#include "common/checkpoint/safetensors.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "google/protobuf/util/time_util.h"

namespace mt::checkpoint {
namespace {

constexpr char kConfigFile[] = "config.json";
constexpr char kWeightsFile[] = "model.safetensors";

bool FileExists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

enum class Conv { kNone, kTranspose, kQkv };

// One of our parameter names and its Hugging Face counterpart.
struct Mapping {
  std::string ours;  // without "model."
  std::string theirs;
  Conv conv = Conv::kNone;
};

std::vector<Mapping> Mappings(const mt::v1::ManifestModel& m) {
  std::vector<Mapping> out = {
      {"embedding.word_embeddings.weight", "transformer.wte.weight", Conv::kNone},
      {"embedding.position_embeddings.weight", "transformer.wpe.weight", Conv::kNone},
  };
  for (int64_t n = 0; n < m.num_layers(); ++n) {
    const std::string o = absl::StrCat("decoder.layers.", n, ".");
    const std::string t = absl::StrCat("transformer.h.", n, ".");
    for (const char* wb : {"weight", "bias"}) {
      out.push_back({o + "input_layernorm." + wb, t + "ln_1." + wb, Conv::kNone});
      out.push_back({o + "self_attention.linear_qkv." + wb, t + "attn.c_attn." + wb, Conv::kQkv});
      out.push_back({o + "self_attention.linear_proj." + wb, t + "attn.c_proj." + wb,
                     std::string(wb) == "weight" ? Conv::kTranspose : Conv::kNone});
      out.push_back({o + "pre_mlp_layernorm." + wb, t + "ln_2." + wb, Conv::kNone});
      out.push_back({o + "mlp.linear_fc1." + wb, t + "mlp.c_fc." + wb,
                     std::string(wb) == "weight" ? Conv::kTranspose : Conv::kNone});
      out.push_back({o + "mlp.linear_fc2." + wb, t + "mlp.c_proj." + wb,
                     std::string(wb) == "weight" ? Conv::kTranspose : Conv::kNone});
    }
  }
  out.push_back({"decoder.final_layernorm.weight", "transformer.ln_f.weight", Conv::kNone});
  out.push_back({"decoder.final_layernorm.bias", "transformer.ln_f.bias", Conv::kNone});
  if (m.untie_embeddings_and_output_weights()) {
    out.push_back({"output_layer.weight", "lm_head.weight", Conv::kNone});
  }
  return out;
}

// Row order of the QKV output: ours (per head [q, k, v]) <-> theirs ([all q | all k | all v]).
// to_theirs[o] = our row that becomes their output o.
std::vector<int64_t> QkvOrderToTheirs(int64_t heads, int64_t head_dim) {
  std::vector<int64_t> order(3 * heads * head_dim);
  for (int64_t h = 0; h < heads; ++h) {
    for (int64_t p = 0; p < 3; ++p) {
      for (int64_t j = 0; j < head_dim; ++j) {
        order[p * heads * head_dim + h * head_dim + j] = h * 3 * head_dim + p * head_dim + j;
      }
    }
  }
  return order;
}

std::vector<int64_t> Inverse(const std::vector<int64_t>& order) {
  std::vector<int64_t> inv(order.size());
  for (size_t i = 0; i < order.size(); ++i) inv[order[i]] = static_cast<int64_t>(i);
  return inv;
}

int64_t HeadDim(const mt::v1::ManifestModel& m) {
  return m.kv_channels() > 0 ? m.kv_channels() : m.hidden_size() / m.num_attention_heads();
}

absl::StatusOr<HostTensor> ToTheirs(const Mapping& map, HostTensor t,
                                    const mt::v1::ManifestModel& m) {
  if (map.ours == "embedding.word_embeddings.weight" || map.ours == "output_layer.weight") {
    return ResizeRows(t, m.vocab_size());
  }
  switch (map.conv) {
    case Conv::kNone:
      return t;
    case Conv::kTranspose:
      return Transpose2D(t);
    case Conv::kQkv: {
      MT_ASSIGN_OR_RETURN(HostTensor p,
                          PermuteRows(t, QkvOrderToTheirs(m.num_attention_heads(), HeadDim(m))));
      if (p.shape.size() == 1) return p;
      return Transpose2D(p);
    }
  }
  return t;
}

absl::StatusOr<HostTensor> FromTheirs(const Mapping& map, HostTensor t,
                                      const mt::v1::ManifestModel& m) {
  switch (map.conv) {
    case Conv::kNone:
      return t;
    case Conv::kTranspose:
      return Transpose2D(t);
    case Conv::kQkv: {
      if (t.shape.size() == 2) {
        MT_ASSIGN_OR_RETURN(t, Transpose2D(t));
      }
      // Checked before the row order (3 * hidden entries) is built from the config's size.
      if (t.shape.empty() || t.shape[0] != 3 * m.hidden_size()) {
        return absl::InvalidArgumentError(absl::StrCat(
            map.theirs, " has ", t.shape.empty() ? 0 : t.shape[0],
            " QKV rows; config.json's n_embd ", m.hidden_size(), " needs ", 3 * m.hidden_size()));
      }
      return PermuteRows(t, Inverse(QkvOrderToTheirs(m.num_attention_heads(), HeadDim(m))));
    }
  }
  return t;
}

// Integer field of config.json; `dflt` when absent or null.
absl::StatusOr<int64_t> ConfigInt(const google::protobuf::Struct& config, const std::string& key,
                                  int64_t dflt, bool required) {
  auto it = config.fields().find(key);
  if (it == config.fields().end() ||
      it->second.kind_case() == google::protobuf::Value::kNullValue) {
    if (required) {
      return absl::InvalidArgumentError(absl::StrCat("config.json: \"", key, "\" is missing"));
    }
    return dflt;
  }
  const double v = it->second.number_value();
  if (it->second.kind_case() != google::protobuf::Value::kNumberValue || v != std::floor(v) ||
      v < 0 || v > 1e9) {
    return absl::InvalidArgumentError(
        absl::StrCat("config.json: \"", key, "\" is not a non-negative integer"));
  }
  return static_cast<int64_t>(v);
}

// `theirs` in the index; some exports (GPT2Model rather than GPT2LMHeadModel) drop the
// "transformer." prefix. nullptr when absent.
const SafetensorsEntry* FindTheirs(const SafetensorsIndex& index, const std::string& theirs) {
  const SafetensorsEntry* e = index.Find(theirs);
  if (e == nullptr && absl::StartsWith(theirs, "transformer.")) e = index.Find(theirs.substr(12));
  return e;
}

// The shape Hugging Face stores `theirs` in for model `m` (Conv1D weights are [in, out]).
std::vector<int64_t> TheirShape(const std::string& theirs, const mt::v1::ManifestModel& m) {
  const int64_t h = m.hidden_size();
  const int64_t f = m.ffn_hidden_size();
  const auto ends = [&theirs](absl::string_view s) { return absl::EndsWith(theirs, s); };
  if (ends("wte.weight") || ends("lm_head.weight")) return {m.vocab_size(), h};
  if (ends("wpe.weight")) return {m.max_position_embeddings(), h};
  if (ends("attn.c_attn.weight")) return {h, 3 * h};
  if (ends("attn.c_attn.bias")) return {3 * h};
  if (ends("attn.c_proj.weight")) return {h, h};
  if (ends("mlp.c_fc.weight")) return {h, f};
  if (ends("mlp.c_fc.bias")) return {f};
  if (ends("mlp.c_proj.weight")) return {f, h};
  return {h};  // layer norms, the remaining biases
}

// Parameters the config describes, as a double (no overflow for any config that parsed).
double ClaimedParameters(const mt::v1::ManifestModel& m) {
  const double h = m.hidden_size(), f = m.ffn_hidden_size(), v = m.vocab_size();
  const double per_layer = 4 * h + (3 * h * h + 3 * h) + (h * h + h) + (h * f + f) + (f * h + h);
  return v * h * (m.untie_embeddings_and_output_weights() ? 2 : 1) +
         static_cast<double>(m.max_position_embeddings()) * h +
         static_cast<double>(m.num_layers()) * per_layer + 2 * h;
}

// The config against the weights, before anything is allocated for it: first what the file
// can hold at all (tensor count, bytes at 2 bytes a parameter, the smallest float type), then
// every tensor's presence, dtype and shape, and no layers beyond the config's.
absl::Status CheckConfigAgainstWeights(const std::string& dir, const mt::v1::ManifestModel& m,
                                       const SafetensorsIndex& index) {
  constexpr int kTensorsPerLayer = 12;
  const std::string weights = JoinPath(dir, kWeightsFile);
  if (m.num_layers() > static_cast<int64_t>(index.tensors.size()) / kTensorsPerLayer) {
    return absl::InvalidArgumentError(absl::StrCat(
        dir, "/config.json: n_layer ", m.num_layers(), " needs ", kTensorsPerLayer,
        " tensors a layer; ", weights, " holds ", index.tensors.size(), " tensors in all"));
  }
  const double data_bytes = static_cast<double>(index.file_size - index.data_start);
  if (2 * ClaimedParameters(m) > data_bytes) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s/config.json describes %.0f parameters (at least %.0f bytes); %s holds %.0f bytes of "
        "data: the config does not describe these weights",
        dir, ClaimedParameters(m), 2 * ClaimedParameters(m), weights, data_bytes));
  }
  for (const Mapping& map : Mappings(m)) {
    const SafetensorsEntry* e = FindTheirs(index, map.theirs);
    if (e == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(weights, " lacks ", map.theirs,
                                                     ", which config.json (n_layer ",
                                                     m.num_layers(), ") implies"));
    }
    const std::vector<int64_t> want = TheirShape(map.theirs, m);
    if (e->shape != want ||
        (e->dtype != DType::kF32 && e->dtype != DType::kF16 && e->dtype != DType::kBF16)) {
      return absl::InvalidArgumentError(absl::StrCat(
          weights, ": ", map.theirs, " is ", DTypeName(e->dtype), ShapeString(e->shape),
          "; config.json implies a float tensor of shape ", ShapeString(want)));
    }
  }
  for (const SafetensorsEntry& e : index.tensors) {
    absl::string_view name = e.name;
    absl::ConsumePrefix(&name, "transformer.");
    int64_t layer = -1;
    if (!absl::ConsumePrefix(&name, "h.")) continue;
    const size_t dot = name.find('.');
    if (absl::SimpleAtoi(name.substr(0, dot), &layer) && layer >= m.num_layers()) {
      return absl::InvalidArgumentError(absl::StrCat(
          weights, " holds layer ", layer, " but config.json says n_layer ", m.num_layers()));
    }
  }
  return absl::OkStatus();
}

class HfSource : public TensorSource {
 public:
  HfSource(std::string dir, mt::v1::CheckpointManifest manifest, SafetensorsIndex index)
      : dir_(std::move(dir)), manifest_(std::move(manifest)), index_(std::move(index)) {
    for (const Mapping& m : Mappings(manifest_.model())) by_ours_["model." + m.ours] = m;
  }

  const mt::v1::CheckpointManifest& manifest() const override { return manifest_; }
  bool Has(const std::string& name) const override { return by_ours_.count(name) > 0; }
  std::vector<std::string> Names() const override {
    std::vector<std::string> out;
    for (const auto& [name, _] : by_ours_) out.push_back(name);
    return out;
  }

  absl::StatusOr<HostTensor> Full(const std::string& name) override {
    auto it = by_ours_.find(name);
    if (it == by_ours_.end()) {
      return absl::NotFoundError(absl::StrCat(dir_, " (Hugging Face GPT-2) has no ", name));
    }
    const std::string path = JoinPath(dir_, kWeightsFile);
    const std::string& theirs = it->second.theirs;
    const SafetensorsEntry* e = FindTheirs(index_, theirs);
    if (e == nullptr) {
      return absl::NotFoundError(absl::StrCat(path, " lacks ", theirs, " (for our ", name, ")"));
    }
    MT_ASSIGN_OR_RETURN(HostTensor t, ReadSafetensorsTensor(path, index_, *e));
    if (t.dtype != DType::kF32) {
      MT_ASSIGN_OR_RETURN(t, CastTo(t, DType::kF32));
    }
    return FromTheirs(it->second, std::move(t), manifest_.model());
  }

 private:
  std::string dir_;
  mt::v1::CheckpointManifest manifest_;
  SafetensorsIndex index_;
  std::map<std::string, Mapping> by_ours_;
};

}  // namespace

bool LooksLikeHfGpt2(const std::string& dir) {
  return FileExists(JoinPath(dir, kConfigFile)) && FileExists(JoinPath(dir, kWeightsFile));
}

absl::StatusOr<std::unique_ptr<TensorSource>> OpenHfGpt2Source(const std::string& dir) {
  // Both files must be the directory's own: a link to some other file of this machine would
  // have us read it (and describe it in errors).
  MT_RETURN_IF_ERROR(CheckStaysInside(dir, kConfigFile, "Hugging Face directory"));
  MT_RETURN_IF_ERROR(CheckStaysInside(dir, kWeightsFile, "Hugging Face directory"));
  MT_ASSIGN_OR_RETURN(std::string text, ReadFile(JoinPath(dir, kConfigFile), 16 << 20));
  google::protobuf::Struct config;
  if (auto s = google::protobuf::util::JsonStringToMessage(text, &config); !s.ok()) {
    // The parser's message quotes the file: not echoed.
    return absl::InvalidArgumentError(absl::StrCat(dir, "/config.json is not a JSON object"));
  }
  auto type = config.fields().find("model_type");
  if (type != config.fields().end() && type->second.string_value() != "gpt2") {
    return absl::InvalidArgumentError(
        absl::StrCat(dir, "/config.json: model_type is not \"gpt2\"; only gpt2 imports"));
  }
  auto act = config.fields().find("activation_function");
  if (act != config.fields().end() && act->second.string_value() != "gelu_new" &&
      act->second.string_value() != "gelu_pytorch_tanh") {
    return absl::InvalidArgumentError(
        absl::StrCat(dir,
                     "/config.json: activation_function is neither \"gelu_new\" nor "
                     "\"gelu_pytorch_tanh\"; mt's GPT uses the tanh GELU"));
  }
  mt::v1::CheckpointManifest manifest;
  manifest.set_format(kFormatName);
  manifest.set_format_version(kFormatVersion);
  manifest.set_source(absl::StrCat("hf-gpt2:", dir));
  mt::v1::ManifestModel* m = manifest.mutable_model();
  MT_ASSIGN_OR_RETURN(int64_t layers, ConfigInt(config, "n_layer", 0, true));
  MT_ASSIGN_OR_RETURN(int64_t hidden, ConfigInt(config, "n_embd", 0, true));
  MT_ASSIGN_OR_RETURN(int64_t heads, ConfigInt(config, "n_head", 0, true));
  MT_ASSIGN_OR_RETURN(int64_t positions, ConfigInt(config, "n_positions", 1024, false));
  MT_ASSIGN_OR_RETURN(int64_t vocab, ConfigInt(config, "vocab_size", 50257, false));
  MT_ASSIGN_OR_RETURN(int64_t inner, ConfigInt(config, "n_inner", 0, false));
  if (layers < 1 || hidden < 1 || heads < 1 || hidden % heads != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(dir, "/config.json: n_layer ", layers, ", n_embd ", hidden, ", n_head ", heads,
                     " do not describe a GPT-2 (n_embd must be a multiple of n_head)"));
  }
  m->set_num_layers(layers);
  m->set_hidden_size(hidden);
  m->set_num_attention_heads(heads);
  m->set_ffn_hidden_size(inner > 0 ? inner : 4 * hidden);
  m->set_kv_channels(hidden / heads);
  m->set_max_position_embeddings(positions);
  m->set_vocab_size(vocab);
  m->set_padded_vocab_size(vocab);
  double eps = 1e-5;
  if (auto e = config.fields().find("layer_norm_epsilon"); e != config.fields().end()) {
    eps = e->second.number_value();
  }
  m->set_layernorm_epsilon(eps);
  bool tied = true;
  if (auto t = config.fields().find("tie_word_embeddings"); t != config.fields().end()) {
    tied = t->second.kind_case() != google::protobuf::Value::kBoolValue || t->second.bool_value();
  }
  m->set_untie_embeddings_and_output_weights(!tied);
  MT_ASSIGN_OR_RETURN(SafetensorsIndex index, ReadSafetensorsIndex(JoinPath(dir, kWeightsFile)));
  mt::v1::Layout* layout = manifest.mutable_layout();
  layout->set_world_size(1);
  layout->set_tensor_model_parallel_size(1);
  layout->set_pipeline_model_parallel_size(1);
  layout->set_data_parallel_size(1);
  layout->set_context_parallel_size(1);
  // The weights bound the config before anything is built from it (no mapping for layers the
  // file cannot hold, no row order for an n_embd its tensors do not have).
  MT_RETURN_IF_ERROR(CheckConfigAgainstWeights(dir, *m, index));
  manifest.set_validation_loss(std::nan(""));
  return std::unique_ptr<TensorSource>(new HfSource(dir, std::move(manifest), std::move(index)));
}

std::string HfGpt2ConfigJson(const mt::v1::ManifestModel& m, DType dtype) {
  const char* torch_dtype = dtype == DType::kF16    ? "float16"
                            : dtype == DType::kBF16 ? "bfloat16"
                                                    : "float32";
  std::string inner =
      m.ffn_hidden_size() == 4 * m.hidden_size() ? "null" : absl::StrCat(m.ffn_hidden_size());
  return absl::StrFormat(
      "{\n"
      "  \"activation_function\": \"gelu_pytorch_tanh\",\n"
      "  \"architectures\": [\"GPT2LMHeadModel\"],\n"
      "  \"attn_pdrop\": 0.0,\n"
      "  \"bos_token_id\": 50256,\n"
      "  \"embd_pdrop\": 0.0,\n"
      "  \"eos_token_id\": 50256,\n"
      "  \"initializer_range\": 0.02,\n"
      "  \"layer_norm_epsilon\": %.17g,\n"
      "  \"model_type\": \"gpt2\",\n"
      "  \"n_ctx\": %d,\n"
      "  \"n_embd\": %d,\n"
      "  \"n_head\": %d,\n"
      "  \"n_inner\": %s,\n"
      "  \"n_layer\": %d,\n"
      "  \"n_positions\": %d,\n"
      "  \"resid_pdrop\": 0.0,\n"
      "  \"scale_attn_weights\": true,\n"
      "  \"tie_word_embeddings\": %s,\n"
      "  \"torch_dtype\": \"%s\",\n"
      "  \"use_cache\": true,\n"
      "  \"vocab_size\": %d\n"
      "}\n",
      m.layernorm_epsilon() > 0 ? m.layernorm_epsilon() : 1e-5, m.max_position_embeddings(),
      m.hidden_size(), m.num_attention_heads(), inner, m.num_layers(), m.max_position_embeddings(),
      m.untie_embeddings_and_output_weights() ? "false" : "true", torch_dtype, m.vocab_size());
}

absl::StatusOr<std::vector<mt::v1::CheckpointFile>> ExportHfGpt2(TensorSource& source,
                                                                 const std::string& out_dir,
                                                                 DType dtype) {
  if (dtype != DType::kF32 && dtype != DType::kF16 && dtype != DType::kBF16) {
    return absl::InvalidArgumentError("export dtype must be float32, float16 or bfloat16");
  }
  const mt::v1::ManifestModel& model = source.manifest().model();
  if (model.kv_channels() > 0 &&
      model.kv_channels() * model.num_attention_heads() != model.hidden_size()) {
    return absl::FailedPreconditionError(
        "Hugging Face GPT-2 needs kv_channels * heads == hidden_size; this model differs");
  }
  if (::mkdir(out_dir.c_str(), 0755) != 0) {
    return ErrnoStatus(errno == EEXIST ? "output directory exists:" : "creating", out_dir, errno);
  }
  std::vector<HostTensor> tensors;
  std::vector<TensorView> views;
  std::vector<std::string> names;
  for (const Mapping& map : Mappings(model)) {
    const std::string master = "optimizer.master." + map.ours;
    const std::string name = source.Has(master) ? master : "model." + map.ours;
    MT_ASSIGN_OR_RETURN(HostTensor t, source.Full(name));
    MT_ASSIGN_OR_RETURN(t, ToTheirs(map, std::move(t), model));
    MT_ASSIGN_OR_RETURN(t, CastTo(t, dtype));
    tensors.push_back(std::move(t));
    names.push_back(map.theirs);
  }
  for (size_t i = 0; i < tensors.size(); ++i) views.push_back(ViewOf(names[i], tensors[i]));
  std::vector<mt::v1::CheckpointFile> files;
  MT_ASSIGN_OR_RETURN(FileDigest weights,
                      WriteSafetensors(JoinPath(out_dir, kWeightsFile), views, {{"format", "pt"}}));
  mt::v1::CheckpointFile f;
  f.set_path(kWeightsFile);
  f.set_size_bytes(weights.size);
  f.set_sha256(weights.sha256);
  files.push_back(f);
  MT_ASSIGN_OR_RETURN(auto w, AtomicFileWriter::Create(JoinPath(out_dir, kConfigFile)));
  MT_RETURN_IF_ERROR(w->Append(HfGpt2ConfigJson(model, dtype)));
  MT_ASSIGN_OR_RETURN(FileDigest config, w->Commit());
  f.set_path(kConfigFile);
  f.set_size_bytes(config.size);
  f.set_sha256(config.sha256);
  files.push_back(f);
  MT_ASSIGN_OR_RETURN(
      std::vector<mt::v1::CheckpointFile> more,
      WriteHfTokenizerFiles(model, source.manifest().spec().data().tokenizer(), out_dir));
  for (mt::v1::CheckpointFile& m : more) files.push_back(std::move(m));
  return files;
}

absl::StatusOr<mt::v1::CheckpointManifest> ImportHfGpt2(const std::string& hf_dir,
                                                        const std::string& out_dir) {
  MT_ASSIGN_OR_RETURN(std::unique_ptr<TensorSource> source, OpenHfGpt2Source(hf_dir));
  if (::mkdir(out_dir.c_str(), 0755) != 0) {
    return ErrnoStatus(errno == EEXIST ? "output directory exists:" : "creating", out_dir, errno);
  }
  std::vector<HostTensor> tensors;
  std::vector<std::string> names;
  for (const std::string& name : source->Names()) {
    MT_ASSIGN_OR_RETURN(HostTensor t, source->Full(name));
    tensors.push_back(std::move(t));
    names.push_back(name);
  }
  std::vector<TensorView> views;
  for (size_t i = 0; i < tensors.size(); ++i) views.push_back(ViewOf(names[i], tensors[i]));
  const std::string shard = ShardFileName(0, 0);
  MT_ASSIGN_OR_RETURN(FileDigest digest, WriteSafetensors(JoinPath(out_dir, shard), views,
                                                          {{"format", kShardFormatName},
                                                           {"format_version", "1"},
                                                           {"tp_rank", "0"},
                                                           {"tp_size", "1"},
                                                           {"pp_rank", "0"}}));
  mt::v1::CheckpointManifest base = source->manifest();
  *base.mutable_create_time() = google::protobuf::util::TimeUtil::GetCurrentTime();
  // Commit into the directory itself: the manifest is written last, so a crash leaves a
  // directory without one, which nothing loads.
  base.set_format(kFormatName);
  base.set_format_version(kFormatVersion);
  for (size_t i = 0; i < tensors.size(); ++i) {
    mt::v1::ManifestTensor* t = base.add_tensors();
    t->set_name(names[i]);
    t->set_file(shard);
    t->set_dtype(DTypeName(tensors[i].dtype));
    for (int64_t d : tensors[i].shape) {
      t->add_shape(d);
      t->add_full_shape(d);
    }
    t->set_split_dim(-1);
    t->set_tp_size(1);
  }
  mt::v1::CheckpointFile* f = base.add_files();
  f->set_path(shard);
  f->set_size_bytes(digest.size);
  f->set_sha256(digest.sha256);
  MT_RETURN_IF_ERROR(WriteManifest(out_dir, base));
  MT_RETURN_IF_ERROR(FsyncDirectory(out_dir));
  return base;
}

}  // namespace mt::checkpoint
