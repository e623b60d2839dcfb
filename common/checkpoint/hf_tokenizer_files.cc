#include "common/checkpoint/hf_tokenizer_files.h"

#include <memory>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/base/files.h"
#include "common/base/logging.h"
#include "common/base/paths.h"
#include "common/base/status_macros.h"
#include "common/checkpoint/file_writer.h"
#include "common/tokenizer/gpt2_bpe_tokenizer.h"

namespace mt::checkpoint {
namespace {

// GPT-2's files are 1 MB and 456 KB; anything far larger is not one.
constexpr uint64_t kMaxTokenizerFileBytes = 64 << 20;
constexpr char kEndOfText[] = "<|endoftext|>";

absl::Status WriteOne(const std::string& out_dir, const std::string& name,
                      const std::string& contents, std::vector<mt::v1::CheckpointFile>* files) {
  MT_ASSIGN_OR_RETURN(auto w, AtomicFileWriter::Create(JoinPath(out_dir, name)));
  MT_RETURN_IF_ERROR(w->Append(contents));
  MT_ASSIGN_OR_RETURN(FileDigest digest, w->Commit());
  mt::v1::CheckpointFile f;
  f.set_path(name);
  f.set_size_bytes(digest.size);
  f.set_sha256(digest.sha256);
  files->push_back(std::move(f));
  return absl::OkStatus();
}

std::string GenerationConfig(int32_t eod) {
  return absl::StrFormat(
      "{\n"
      "  \"bos_token_id\": %d,\n"
      "  \"eos_token_id\": %d,\n"
      "  \"pad_token_id\": %d,\n"
      "  \"do_sample\": false,\n"
      "  \"max_new_tokens\": 64\n"
      "}\n",
      eod, eod, eod);
}

std::string TokenizerConfig(int64_t context) {
  return absl::StrFormat(
      "{\n"
      "  \"tokenizer_class\": \"GPT2Tokenizer\",\n"
      "  \"model_max_length\": %d,\n"
      "  \"bos_token\": \"%s\",\n"
      "  \"eos_token\": \"%s\",\n"
      "  \"unk_token\": \"%s\",\n"
      "  \"add_prefix_space\": false,\n"
      "  \"add_bos_token\": false,\n"
      "  \"clean_up_tokenization_spaces\": false\n"
      "}\n",
      context, kEndOfText, kEndOfText, kEndOfText);
}

std::string SpecialTokensMap() {
  return absl::StrFormat(
      "{\n  \"bos_token\": \"%s\",\n  \"eos_token\": \"%s\",\n  \"unk_token\": \"%s\"\n}\n",
      kEndOfText, kEndOfText, kEndOfText);
}

}  // namespace

absl::StatusOr<std::vector<mt::v1::CheckpointFile>> WriteHfTokenizerFiles(
    const mt::v1::ManifestModel& model, const mt::v1::TokenizerSpec& tokenizer,
    const std::string& out_dir) {
  std::vector<mt::v1::CheckpointFile> files;
  // GPT-2's <|endoftext|> unless the job's tokenizer says otherwise.
  int32_t eod = 50256;
  absl::StatusOr<std::unique_ptr<tokenizer::Gpt2BpeTokenizer>> bpe_or;
  std::string vocab, merges;
  if (PathExists(tokenizer.vocab_file()) && PathExists(tokenizer.merge_file())) {
    MT_ASSIGN_OR_RETURN(vocab, ReadFile(tokenizer.vocab_file(), kMaxTokenizerFileBytes));
    MT_ASSIGN_OR_RETURN(merges, ReadFile(tokenizer.merge_file(), kMaxTokenizerFileBytes));
    // Only real BPE files are copied (never an arbitrary file a spec names), and the error
    // does not quote their bytes.
    bpe_or = tokenizer::Gpt2BpeTokenizer::CreateFromContents(vocab, merges, {});
    if (!bpe_or.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "data.tokenizer.vocab_file ", tokenizer.vocab_file(), " and merge_file ",
          tokenizer.merge_file(), " are not GPT-2 BPE files (gpt2-vocab.json, gpt2-merges.txt)"));
    }
    if ((*bpe_or)->vocab_size() != model.vocab_size()) {
      MT_LOG(WARNING) << "export without tokenizer files: " << tokenizer.vocab_file() << " has "
                      << (*bpe_or)->vocab_size() << " tokens, the model " << model.vocab_size();
      bpe_or = absl::FailedPreconditionError("another vocabulary");
    }
  } else if (!tokenizer.vocab_file().empty() || !tokenizer.merge_file().empty()) {
    MT_LOG(WARNING) << "export without tokenizer files: " << tokenizer.vocab_file() << " or "
                    << tokenizer.merge_file() << " is not here (a job on synthetic tokens?)";
  }
  if (bpe_or.ok() && *bpe_or != nullptr) {
    const std::unique_ptr<tokenizer::Gpt2BpeTokenizer>& bpe = *bpe_or;
    eod = bpe->eod();
    MT_RETURN_IF_ERROR(WriteOne(out_dir, "vocab.json", vocab, &files));
    MT_RETURN_IF_ERROR(WriteOne(out_dir, "merges.txt", merges, &files));
    MT_RETURN_IF_ERROR(WriteOne(out_dir, "tokenizer_config.json",
                                TokenizerConfig(model.max_position_embeddings()), &files));
    MT_RETURN_IF_ERROR(WriteOne(out_dir, "special_tokens_map.json", SpecialTokensMap(), &files));
  }
  MT_RETURN_IF_ERROR(WriteOne(out_dir, "generation_config.json", GenerationConfig(eod), &files));
  return files;
}

}  // namespace mt::checkpoint
