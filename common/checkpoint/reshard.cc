#include "common/checkpoint/reshard.h"

#include <algorithm>
#include <map>
#include <set>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/base/paths.h"
#include "common/base/status_macros.h"
#include "common/checkpoint/checkpoint_dir.h"
#include "common/checkpoint/file_writer.h"
#include "common/checkpoint/hf_gpt2.h"

namespace mt::checkpoint {
namespace {

constexpr char kWordEmbedding[] = "embedding.word_embeddings.weight";
constexpr char kOutputLayer[] = "output_layer.weight";

// With tied embeddings the output layer IS the word embedding; a checkpoint may hold either
// name (the last pipeline stage's copy is called output_layer.weight).
std::string TiedAlternative(const std::string& name) {
  if (absl::EndsWith(name, kOutputLayer)) {
    return name.substr(0, name.size() - sizeof(kOutputLayer) + 1) + kWordEmbedding;
  }
  if (absl::EndsWith(name, kWordEmbedding)) {
    return name.substr(0, name.size() - sizeof(kWordEmbedding) + 1) + kOutputLayer;
  }
  return "";
}

class CheckpointSource : public TensorSource {
 public:
  CheckpointSource(std::string dir, mt::v1::CheckpointManifest manifest,
                   std::shared_ptr<const InMemoryFiles> files)
      : dir_(std::move(dir)), manifest_(std::move(manifest)), files_(std::move(files)) {
    for (int i = 0; i < manifest_.tensors_size(); ++i) {
      by_name_[manifest_.tensors(i).name()].push_back(i);
    }
  }

  const mt::v1::CheckpointManifest& manifest() const override { return manifest_; }
  bool Has(const std::string& name) const override { return by_name_.count(name) > 0; }
  std::vector<std::string> Names() const override {
    std::vector<std::string> out;
    for (const auto& [name, _] : by_name_) out.push_back(name);
    return out;
  }

  absl::StatusOr<HostTensor> Full(const std::string& name) override {
    MT_ASSIGN_OR_RETURN(std::vector<const mt::v1::ManifestTensor*> slices, Slices(name));
    const int split = slices[0]->split_dim();
    if (split < 0) return Read(*slices[0]);
    std::vector<HostTensor> parts;
    for (const auto* t : slices) {
      MT_ASSIGN_OR_RETURN(HostTensor part, Read(*t));
      parts.push_back(std::move(part));
    }
    return ConcatAlong(parts, split);
  }

  absl::StatusOr<HostTensor> Slice(const std::string& name, const SliceRequest& request) override {
    MT_ASSIGN_OR_RETURN(std::vector<const mt::v1::ManifestTensor*> slices, Slices(name));
    const mt::v1::ManifestTensor& first = *slices[0];
    std::vector<int64_t> shape(first.shape().begin(), first.shape().end());
    // The same cut as the writer's: read only this rank's file.
    if (first.split_dim() == request.split_dim && first.tp_size() == request.tp_size &&
        shape == request.shape) {
      for (const auto* t : slices) {
        if (t->tp_rank() == request.tp_rank || t->split_dim() < 0) return Read(*t);
      }
    }
    if (first.split_dim() < 0 && shape == request.shape && request.split_dim < 0) {
      return Read(first);
    }
    MT_ASSIGN_OR_RETURN(HostTensor full, Full(name));
    return CutSlice(name, std::move(full), request);
  }

  absl::StatusOr<std::optional<StoredTensor>> Locate(const std::string& name,
                                                     const SliceRequest& request) override {
    MT_ASSIGN_OR_RETURN(std::vector<const mt::v1::ManifestTensor*> slices, Slices(name));
    if (files_ == nullptr) return std::optional<StoredTensor>();
    const mt::v1::ManifestTensor& first = *slices[0];
    std::vector<int64_t> shape(first.shape().begin(), first.shape().end());
    if (shape != request.shape) return std::optional<StoredTensor>();
    const mt::v1::ManifestTensor* t = nullptr;
    if (first.split_dim() < 0 && request.split_dim < 0) {
      t = &first;
    } else if (first.split_dim() == request.split_dim && first.tp_size() == request.tp_size) {
      for (const auto* s : slices) {
        if (s->tp_rank() == request.tp_rank || s->split_dim() < 0) {
          t = s;
          break;
        }
      }
    }
    if (t == nullptr) return std::optional<StoredTensor>();
    const FileBytes* bytes = files_->Find(t->file());
    if (bytes == nullptr) return std::optional<StoredTensor>();
    MT_ASSIGN_OR_RETURN(const SafetensorsIndex* index, Index(*t));
    const SafetensorsEntry* e = index->Find(t->name());
    if (e == nullptr) {
      return absl::DataLossError(
          absl::StrCat(JoinPath(dir_, t->file()), " lacks ", t->name(), " (the manifest says)"));
    }
    StoredTensor out;
    out.file = t->file();
    out.dtype = e->dtype;
    out.shape = e->shape;
    out.offset = index->data_start + e->begin;
    out.nbytes = e->end - e->begin;
    out.data = bytes->data.get() + out.offset;
    return std::optional<StoredTensor>(std::move(out));
  }

 private:
  // The TP slices of `name` from one pipeline stage (the lowest that has it), by tp_rank.
  absl::StatusOr<std::vector<const mt::v1::ManifestTensor*>> Slices(const std::string& name) {
    auto it = by_name_.find(name);
    if (it == by_name_.end()) {
      const std::string alt = TiedAlternative(name);
      if (!alt.empty() && !manifest_.model().untie_embeddings_and_output_weights()) {
        it = by_name_.find(alt);
      }
    }
    if (it == by_name_.end()) {
      return absl::NotFoundError(absl::StrCat("checkpoint ", dir_, " has no tensor ", name));
    }
    int pp = -1;
    for (int i : it->second) {
      const int p = manifest_.tensors(i).pp_rank();
      if (pp < 0 || p < pp) pp = p;
    }
    std::vector<const mt::v1::ManifestTensor*> out;
    for (int i : it->second) {
      if (manifest_.tensors(i).pp_rank() == pp) out.push_back(&manifest_.tensors(i));
    }
    std::sort(out.begin(), out.end(),
              [](const auto* a, const auto* b) { return a->tp_rank() < b->tp_rank(); });
    const int tp_size = out[0]->tp_size();
    const bool complete =
        out[0]->split_dim() < 0 ? !out.empty() : static_cast<int>(out.size()) == tp_size;
    for (size_t r = 0; complete && out[0]->split_dim() >= 0 && r < out.size(); ++r) {
      if (out[r]->tp_rank() != static_cast<int>(r)) {
        return absl::DataLossError(absl::StrCat(name, ": TP slice ", r, " missing"));
      }
    }
    if (!complete) {
      return absl::DataLossError(absl::StrCat(name, ": ", out.size(), " of ", tp_size,
                                              " tensor-parallel slices in the manifest"));
    }
    return out;
  }

  // The header of t's file (parsed once), from memory when the file is held there.
  absl::StatusOr<const SafetensorsIndex*> Index(const mt::v1::ManifestTensor& t) {
    auto it = indexes_.find(t.file());
    if (it == indexes_.end()) {
      const std::string path = JoinPath(dir_, t.file());
      const FileBytes* bytes = files_ != nullptr ? files_->Find(t.file()) : nullptr;
      absl::StatusOr<SafetensorsIndex> index =
          bytes != nullptr ? ParseSafetensorsFile(bytes->view()) : ReadSafetensorsIndex(path);
      if (!index.ok() && bytes != nullptr) {
        return absl::DataLossError(absl::StrCat(path, ": ", index.status().message()));
      }
      MT_RETURN_IF_ERROR(index.status());
      it = indexes_.emplace(t.file(), *std::move(index)).first;
    }
    return &it->second;
  }

  absl::StatusOr<HostTensor> Read(const mt::v1::ManifestTensor& t) {
    const std::string path = JoinPath(dir_, t.file());
    const FileBytes* bytes = files_ != nullptr ? files_->Find(t.file()) : nullptr;
    MT_ASSIGN_OR_RETURN(const SafetensorsIndex* index, Index(t));
    const SafetensorsEntry* e = index->Find(t.name());
    if (e == nullptr) {
      return absl::DataLossError(absl::StrCat(path, " lacks ", t.name(), " (the manifest says)"));
    }
    if (bytes != nullptr) return SafetensorsTensorFromMemory(bytes->view(), *index, *e);
    return ReadSafetensorsTensor(path, *index, *e);
  }

  std::string dir_;
  mt::v1::CheckpointManifest manifest_;
  std::map<std::string, std::vector<int>> by_name_;
  std::map<std::string, SafetensorsIndex> indexes_;
  std::shared_ptr<const InMemoryFiles> files_;  // may be null
};

}  // namespace

bool IsVocabPadded(const std::string& name) {
  return absl::EndsWith(name, kWordEmbedding) || absl::EndsWith(name, kOutputLayer);
}

absl::StatusOr<HostTensor> TensorSource::Slice(const std::string& name,
                                               const SliceRequest& request) {
  MT_ASSIGN_OR_RETURN(HostTensor full, Full(name));
  return CutSlice(name, std::move(full), request);
}

absl::StatusOr<std::optional<StoredTensor>> TensorSource::Locate(const std::string& name,
                                                                 const SliceRequest& request) {
  (void)name;
  (void)request;
  return std::optional<StoredTensor>();
}

absl::StatusOr<HostTensor> CutSlice(const std::string& name, HostTensor full,
                                    const SliceRequest& request) {
  std::vector<int64_t> want_full = request.shape;
  if (request.split_dim >= 0) {
    if (request.split_dim >= static_cast<int>(want_full.size())) {
      return absl::InvalidArgumentError(absl::StrCat(name, ": split dimension ", request.split_dim,
                                                     " of a tensor ", ShapeString(request.shape)));
    }
    want_full[request.split_dim] *= request.tp_size;
  }
  if (IsVocabPadded(name) && !full.shape.empty() && !want_full.empty() &&
      full.shape[0] != want_full[0]) {
    MT_ASSIGN_OR_RETURN(full, ResizeRows(full, want_full[0]));
  }
  if (full.shape != want_full) {
    return absl::InvalidArgumentError(absl::StrCat(
        name, ": the checkpoint's tensor is ", ShapeString(full.shape), ", this model needs ",
        ShapeString(want_full), " (split over ", request.tp_size,
        " TP ranks); the model shapes of the checkpoint and the spec differ"));
  }
  if (request.split_dim < 0 || request.tp_size == 1) return full;
  const int64_t part = request.shape[request.split_dim];
  return SliceAlong(full, request.split_dim, part * request.tp_rank, part);
}

absl::StatusOr<std::unique_ptr<TensorSource>> OpenCheckpointSource(
    const std::string& dir, mt::v1::CheckpointManifest manifest,
    std::shared_ptr<const InMemoryFiles> files) {
  return std::unique_ptr<TensorSource>(
      new CheckpointSource(dir, std::move(manifest), std::move(files)));
}

absl::StatusOr<std::unique_ptr<TensorSource>> OpenAnySource(const std::string& dir) {
  if (LooksLikeHfGpt2(dir)) return OpenHfGpt2Source(dir);
  MT_ASSIGN_OR_RETURN(mt::v1::CheckpointManifest manifest, ReadManifest(dir));
  return OpenCheckpointSource(dir, std::move(manifest));
}

}  // namespace mt::checkpoint
