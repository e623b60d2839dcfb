// Evaluation and generation jobs through the whole stack (issue 17): a real coordinator, a CPU
// worker daemon and trainer processes. A tiny GPT trains and saves; `mtctl eval` of its
// checkpoint gives the loss `mt-worker eval` gives locally and lands on the catalog entry, the
// job's description and the coordinator's metrics; `mtctl generate` (and the GenerateText
// stream under it) delivers the local greedy text piece by piece; a stream whose client goes
// away cancels its job; bad input is refused naming the flag.
#include <sys/stat.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/checkpoint/checkpoint_dir.h"
#include "gmock/gmock.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "mt/v1/client_service.grpc.pb.h"
#include "tests/testutil/http.h"
#include "tests/testutil/job_fixture.h"

namespace mt {
namespace {

using ::testing::HasSubstr;
using testutil::CommandResult;

// The number after `key` in `text` ("key": VALUE or key=VALUE).
double NumberAfter(const std::string& text, const std::string& key) {
  const size_t at = text.find(key);
  EXPECT_NE(at, std::string::npos) << key << " in " << text;
  return at == std::string::npos ? NAN : std::atof(text.c_str() + at + key.size());
}

class InferenceJobsTest : public testutil::JobFixture {
 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(JobFixture::SetUp());
    StartWorkers(1);
  }

  CommandResult Mtctl(std::vector<std::string> args) { return cluster_.Mtctl(std::move(args)); }

  // A directory with vocab.json and merges.txt linked to the GPT-2 BPE assets; empty when the
  // assets are missing (deploy/setup.sh fetches them).
  std::string TokenizerDir() {
    const char* env = std::getenv("MT_ASSET_DIR");
    const std::string assets = env != nullptr ? env : MT_ASSET_DIR;
    const std::string vocab = assets + "/gpt2-vocab.json";
    const std::string merges = assets + "/gpt2-merges.txt";
    struct stat st;
    if (assets.empty() || ::stat(vocab.c_str(), &st) != 0 || ::stat(merges.c_str(), &st) != 0) {
      return "";
    }
    const std::string dir = cluster_.dir() + "/tokenizer";
    ::mkdir(dir.c_str(), 0755);
    EXPECT_EQ(::symlink(vocab.c_str(), (dir + "/vocab.json").c_str()), 0);
    EXPECT_EQ(::symlink(merges.c_str(), (dir + "/merges.txt").c_str()), 0);
    return dir;
  }

  // Trains the tiny GPT for 4 steps, saving at the end; returns the catalog id of its save.
  std::string TrainAndSave(const std::string& tokenizer_dir, std::string* directory) {
    testutil::TinyJob job("trained", data_, 4);
    job.dp = "1";
    job.global_batch_size = 4;
    job.split = "80,20,0";
    if (!tokenizer_dir.empty()) job.tokenizer_dir = tokenizer_dir;
    job.sections = {absl::StrCat("checkpoint: {save_dir: ", cluster_.dir(), "/ckpt}")};
    const std::string id = Submit(job.Yaml(), "train.yaml");
    EXPECT_TRUE(cluster_.WaitForState(id, mt::v1::JOB_STATE_SUCCEEDED, absl::Minutes(3)))
        << EventText(id) << cluster_.Log("w0.log");
    // The save's report may reach the coordinator just after the rank's exit.
    const absl::Time deadline = absl::Now() + absl::Seconds(20);
    while (absl::Now() < deadline) {
      CommandResult r = Mtctl({"-o", "json", "checkpoints", "list", id});
      mt::v1::ListCheckpointsResponse list;
      EXPECT_TRUE(google::protobuf::util::JsonStringToMessage(r.out, &list).ok()) << r.out;
      for (const auto& c : list.checkpoints()) {
        if (c.step() == 4 && c.state() == mt::v1::CHECKPOINT_STATE_COMPLETE) {
          *directory = c.directory();
          return c.id();
        }
      }
      absl::SleepFor(absl::Milliseconds(200));
    }
    ADD_FAILURE() << "no checkpoint of step 4 in the catalog: " << cluster_.Log("coordinator.log");
    return "";
  }

  // `mt-worker generate DIRECTORY FLAGS...`, the local command a job's text must equal.
  static absl::StatusOr<CommandResult> LocalGenerate(const std::string& directory,
                                                     const std::vector<std::string>& flags) {
    std::vector<std::string> args = {testutil::BinDir() + "/mt-worker", "generate", directory};
    args.insert(args.end(), flags.begin(), flags.end());
    return testutil::RunCommand(args, absl::Seconds(120));
  }

  // `mt-worker generate`'s greedy text of `prompt` (8 new tokens) from the checkpoint in
  // `directory`, and a newline: what a generation job's stream and mtctl must give. Empty after
  // a reported failure of the command.
  static std::string LocalGreedyText(const std::string& directory, const std::string& prompt) {
    const absl::StatusOr<CommandResult> local = LocalGenerate(
        directory, {"--prompt", prompt, "--temperature", "0", "--max-new-tokens", "8"});
    if (!local.ok()) {
      ADD_FAILURE() << local.status().message();
      return "";
    }
    EXPECT_EQ(local->exit_code, 0) << local->err;
    return local->exit_code == 0 ? local->out : "";
  }

  std::unique_ptr<mt::v1::ClientService::Stub> Stub() {
    return mt::v1::ClientService::NewStub(
        grpc::CreateChannel(cluster_.address(), grpc::InsecureChannelCredentials()));
  }

  // A greedy GenerateText request for 8 new tokens.
  static mt::v1::GenerateTextRequest GreedyRequest(const std::string& checkpoint,
                                                   const std::string& prompt) {
    mt::v1::GenerateTextRequest request;
    request.set_checkpoint(checkpoint);
    request.mutable_generate()->set_prompt(prompt);
    request.mutable_generate()->set_temperature(0);
    request.mutable_generate()->set_max_new_tokens(8);
    return request;
  }

  // What a whole GenerateText stream carried: the job's id, the text of its pieces, how many
  // pieces had text, the sample of every text message and the samples' ends (done messages).
  struct Stream {
    grpc::Status status;
    std::string job, text;
    int pieces = 0;
    std::vector<int32_t> samples;
    std::vector<mt::v1::GeneratedText> ends;
  };

  Stream ReadStream(const mt::v1::GenerateTextRequest& request) {
    grpc::ClientContext context;
    auto reader = Stub()->GenerateText(&context, request);
    mt::v1::GenerateTextResponse m;
    Stream out;
    while (reader->Read(&m)) {
      if (!m.job_id().empty()) out.job = m.job_id();
      if (!m.has_text()) continue;
      out.samples.push_back(m.text().sample());
      out.text += m.text().text();
      if (!m.text().text().empty()) ++out.pieces;
      if (m.text().done()) out.ends.push_back(m.text());
    }
    out.status = reader->Finish();
    return out;
  }
};

TEST_F(InferenceJobsTest, EvalJobGivesTheLocalLossAndLandsOnTheCheckpoint) {
  std::string directory;
  const std::string checkpoint = TrainAndSave("", &directory);
  ASSERT_FALSE(checkpoint.empty());

  // The local form on the same checkpoint, data and flags.
  const absl::StatusOr<CommandResult> local =
      testutil::RunCommand({testutil::BinDir() + "/mt-worker", "eval", directory, "--data-path",
                            data_, "--split", "80,20,0", "--eval-iters", "3", "-o", "json"},
                           absl::Seconds(120));
  ASSERT_TRUE(local.ok()) << local.status().message();
  ASSERT_EQ(local->exit_code, 0) << local->err;
  const double local_loss = NumberAfter(local->out, "\"loss\":");
  const double local_tokens = NumberAfter(local->out, "\"tokens\":");

  CommandResult eval = Mtctl({"-o", "json", "eval", checkpoint, "--data-path", data_, "--split",
                              "80,20,0", "--eval-iters", "3", "--wait"});
  ASSERT_EQ(eval.exit_code, 0) << eval.err << cluster_.Log("w0.log");
  EXPECT_NEAR(NumberAfter(eval.out, "\"loss\": "), local_loss, 1e-6) << eval.out;
  EXPECT_EQ(NumberAfter(eval.out, "\"tokens\": "), local_tokens) << eval.out;
  EXPECT_EQ(NumberAfter(eval.out, "\"tokens\": "), 3 * 2 * 16) << eval.out;
  EXPECT_EQ(NumberAfter(eval.out, "\"step\": "), 4) << eval.out;
  EXPECT_NEAR(NumberAfter(eval.out, "\"perplexity\": "), std::exp(local_loss),
              1e-3 * std::exp(local_loss));
  const size_t at = eval.out.find("\"job\": \"");
  ASSERT_NE(at, std::string::npos) << eval.out;
  const std::string job = eval.out.substr(at + 8, eval.out.find('"', at + 8) - at - 8);

  // On the catalog entry ...
  CommandResult described = Mtctl({"-o", "json", "checkpoints", "describe", checkpoint});
  mt::v1::Checkpoint c;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(described.out, &c).ok()) << described.out;
  ASSERT_EQ(c.evaluations_size(), 1) << described.out;
  EXPECT_EQ(c.evaluations(0).job_id(), job);
  EXPECT_NEAR(c.evaluations(0).loss(), local_loss, 1e-6);
  EXPECT_EQ(c.evaluations(0).tokens(), 3 * 2 * 16);
  EXPECT_EQ(c.evaluations(0).data_path(), data_);
  EXPECT_THAT(Mtctl({"checkpoints", "describe", checkpoint}).out, HasSubstr("evaluations:"));
  // ... in the job's description ...
  const std::string text = Mtctl({"describe", job}).out;
  EXPECT_THAT(text, HasSubstr(absl::StrCat("eval of      ", checkpoint)));
  EXPECT_THAT(text, HasSubstr("  result     loss "));
  // ... and in the coordinator's metrics, by the job that saved the checkpoint.
  const std::string metrics = CoordinatorMetricsAddress();
  ASSERT_FALSE(metrics.empty());
  absl::StatusOr<testutil::HttpResult> scrape = testutil::HttpGet(metrics, "/metrics");
  ASSERT_TRUE(scrape.ok()) << scrape.status().message();
  EXPECT_THAT(scrape->body, HasSubstr(absl::StrCat("mt_checkpoint_eval_loss{job=\"", c.job_id(),
                                                   "\",weights=\"none\"}")));
  EXPECT_THAT(scrape->body, HasSubstr("mt_checkpoint_eval_tokens_total 96"));

  // The same by directory: an absolute path works as well as the id.
  CommandResult by_dir = Mtctl({"-o", "json", "eval", directory, "--data-path", data_, "--split",
                                "80,20,0", "--eval-iters", "3", "--wait"});
  ASSERT_EQ(by_dir.exit_code, 0) << by_dir.err;
  EXPECT_NEAR(NumberAfter(by_dir.out, "\"loss\": "), local_loss, 1e-6);

  // Bad input, each refused naming what to fix.
  CommandResult bad = Mtctl({"eval", "c-999", "--data-path", data_});
  EXPECT_EQ(bad.exit_code, 3) << bad.err;
  EXPECT_THAT(bad.err, HasSubstr("c-999"));
  bad = Mtctl({"eval", checkpoint});
  EXPECT_EQ(bad.exit_code, 2) << bad.err;
  EXPECT_THAT(bad.err, HasSubstr("--data-path PREFIX is required"));
  bad = Mtctl({"eval", checkpoint, "--data-path", data_, "--eval-iters", "0"});
  EXPECT_EQ(bad.exit_code, 2) << bad.err;
  EXPECT_THAT(bad.err, HasSubstr("--eval-iters 0"));
  bad = Mtctl({"eval", checkpoint, "--data-path", cluster_.dir() + "/nothing"});
  EXPECT_EQ(bad.exit_code, 2) << bad.err;
  EXPECT_THAT(bad.err, HasSubstr("--data-path " + cluster_.dir() + "/nothing"));
  // Over the API too (mtctl checks first): the coordinator refuses before queueing anything.
  mt::v1::EvaluateCheckpointRequest request;
  request.set_checkpoint(checkpoint);
  request.mutable_eval()->set_data_path(data_);
  request.mutable_eval()->set_eval_iters(-2);
  mt::v1::SubmitJobResponse response;
  grpc::ClientContext context;
  const grpc::Status refused = Stub()->EvaluateCheckpoint(&context, request, &response);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(refused.error_message(), HasSubstr("--eval-iters -2"));
}

TEST_F(InferenceJobsTest, GenerateStreamsTheLocalGreedyTextAndAGoneClientCancels) {
  const std::string tokenizer = TokenizerDir();
  if (tokenizer.empty()) GTEST_SKIP() << "no GPT-2 BPE files in $MT_ASSET_DIR";
  std::string directory;
  const std::string checkpoint = TrainAndSave(tokenizer, &directory);
  ASSERT_FALSE(checkpoint.empty());
  const std::string prompt = "Call me Ishmael.";
  const std::string local = LocalGreedyText(directory, prompt);
  ASSERT_GT(local.size(), 1u);  // the text and a newline

  // The stream: the job's id first, then the text piece by piece, then the sample's end.
  const mt::v1::GenerateTextRequest request = GreedyRequest(checkpoint, prompt);
  {
    const Stream stream = ReadStream(request);
    ASSERT_TRUE(stream.status.ok()) << stream.status.error_message() << cluster_.Log("w0.log");
    EXPECT_FALSE(stream.job.empty());
    ASSERT_EQ(stream.ends.size(), 1u);
    EXPECT_EQ(stream.ends[0].finish_reason(), "length");
    EXPECT_EQ(stream.ends[0].tokens(), 8);
    EXPECT_GT(stream.pieces, 1) << stream.text;
    EXPECT_EQ(stream.text + "\n", local);
    EXPECT_TRUE(cluster_.WaitForState(stream.job, mt::v1::JOB_STATE_SUCCEEDED, absl::Seconds(30)))
        << EventText(stream.job);
  }
  // mtctl prints the same text.
  CommandResult cli = Mtctl(
      {"generate", checkpoint, "--prompt", prompt, "--temperature", "0", "--max-new-tokens", "8"});
  ASSERT_EQ(cli.exit_code, 0) << cli.err;
  EXPECT_EQ(cli.out, local);
  EXPECT_THAT(cli.err, HasSubstr("finished by length"));
  CommandResult json = Mtctl({"-o", "json", "generate", checkpoint, "--prompt", prompt,
                              "--temperature", "0", "--max-new-tokens", "8", "-n", "2"});
  ASSERT_EQ(json.exit_code, 0) << json.err;
  EXPECT_THAT(json.out, HasSubstr("\"sample\": 1"));

  // A client that goes away (here right after the job's id) cancels its job.
  {
    grpc::ClientContext context;
    auto reader = Stub()->GenerateText(&context, request);
    mt::v1::GenerateTextResponse m;
    ASSERT_TRUE(reader->Read(&m));
    const std::string job = m.job_id();
    ASSERT_FALSE(job.empty());
    context.TryCancel();
    (void)reader->Finish();
    EXPECT_TRUE(cluster_.WaitForState(job, mt::v1::JOB_STATE_CANCELLED, absl::Seconds(30)))
        << EventText(job);
    EXPECT_THAT(EventText(job), HasSubstr("generate stream went away"));
  }

  // Bad sampling values and a missing prompt, named.
  for (const auto& [flag, value] :
       std::vector<std::pair<std::string, std::string>>{{"--temperature", "-1"},
                                                        {"--top-p", "1.5"},
                                                        {"--top-k", "-3"},
                                                        {"--max-new-tokens", "0"}}) {
    CommandResult bad = Mtctl({"generate", checkpoint, "--prompt", "a", flag, value});
    EXPECT_EQ(bad.exit_code, 2) << flag << ": " << bad.err;
    EXPECT_THAT(bad.err, HasSubstr(flag + " ")) << flag;
  }
  CommandResult bad = Mtctl({"generate", checkpoint});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_THAT(bad.err, HasSubstr("--prompt"));
  bad = Mtctl({"generate", "c-999", "--prompt", "a"});
  EXPECT_EQ(bad.exit_code, 3) << bad.err;
  // A prompt longer than the model's 16 positions fails the job, and the stream says why.
  bad = Mtctl({"generate", checkpoint, "--prompt", std::string(200, 'x') + " y z"});
  EXPECT_EQ(bad.exit_code, 1) << bad.err;
  EXPECT_THAT(bad.err, HasSubstr("--prompt: "));
}

// An eval job over several ranks (one core each, four workers): the checkpoint, saved by a
// one-rank job, is resharded to TP 2 x PP 2 and evaluated through the pipeline, then to TP 2 x
// DP 2 with a micro-batch of 1 per DP rank. Both read the samples of `mt-worker eval` with a
// micro-batch of 2, and give its loss: fp32, the sharded products summing in another order
// (measured: within 1.5e-6 of the local loss, which the command prints to 6 decimals; bound
// 1e-5). The vocabulary keeps the checkpoint's padding: padded again for TP 2, the loss read
// 0.003 higher.
class ShardedEvalJobsTest : public InferenceJobsTest {
 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(JobFixture::SetUp());
    StartWorkers(4);
  }
};

TEST_F(ShardedEvalJobsTest, TensorPipelineAndDataParallelRanksGiveTheLocalLoss) {
  std::string directory;
  const std::string checkpoint = TrainAndSave("", &directory);
  ASSERT_FALSE(checkpoint.empty());
  const absl::StatusOr<CommandResult> local = testutil::RunCommand(
      {testutil::BinDir() + "/mt-worker", "eval", directory, "--data-path", data_, "--split",
       "80,20,0", "--eval-iters", "3", "--micro-batch-size", "2", "-o", "json"},
      absl::Seconds(120));
  ASSERT_TRUE(local.ok()) << local.status().message();
  ASSERT_EQ(local->exit_code, 0) << local->err;
  const double local_loss = NumberAfter(local->out, "\"loss\":");
  ASSERT_GT(local_loss, 0.5);

  const std::vector<std::vector<std::string>> layouts = {
      {"--tensor-model-parallel-size", "2", "--pipeline-model-parallel-size", "2"},
      {"--tensor-model-parallel-size", "2", "--data-parallel-size", "2", "--micro-batch-size",
       "1"}};
  for (const std::vector<std::string>& layout : layouts) {
    std::vector<std::string> args = {"-o",           "json", "eval",    checkpoint,
                                     "--data-path",  data_,  "--split", "80,20,0",
                                     "--eval-iters", "3",    "--wait"};
    args.insert(args.end(), layout.begin(), layout.end());
    CommandResult eval = Mtctl(args);
    const std::string what = absl::StrJoin(layout, " ");
    ASSERT_EQ(eval.exit_code, 0) << what << "\n"
                                 << eval.err << cluster_.Log("w0.log") << cluster_.Log("w1.log");
    const double loss = NumberAfter(eval.out, "\"loss\": ");
    std::fprintf(stderr, "%s: loss %.9f, local %.9f, difference %.2e\n", what.c_str(), loss,
                 local_loss, loss - local_loss);
    EXPECT_NEAR(loss, local_loss, 1e-5) << what << eval.out;
    EXPECT_EQ(NumberAfter(eval.out, "\"tokens\": "), 3 * 2 * 16) << what << eval.out;
    EXPECT_EQ(NumberAfter(eval.out, "\"step\": "), 4) << what << eval.out;
    const size_t at = eval.out.find("\"job\": \"");
    ASSERT_NE(at, std::string::npos) << eval.out;
    const std::string job = eval.out.substr(at + 8, eval.out.find('"', at + 8) - at - 8);
    auto got = cluster_.GetJob(job);
    ASSERT_TRUE(got.ok()) << got.status().message();
    EXPECT_EQ(got->layout().world_size(), 4) << what;
    EXPECT_EQ(got->placement_size(), 4) << what;
  }

  // A layout the model cannot take, and int8 past one rank, are refused naming the fix.
  CommandResult bad =
      Mtctl({"eval", checkpoint, "--data-path", data_, "--tensor-model-parallel-size", "3"});
  EXPECT_EQ(bad.exit_code, 2) << bad.err;
  EXPECT_THAT(bad.err, HasSubstr("--tensor-model-parallel-size 3: the checkpoint's 2 attention "
                                 "heads do not split evenly over 3 ranks"));
  bad = Mtctl({"eval", checkpoint, "--data-path", data_, "--data-parallel-size", "2", "--quantize",
               "int8"});
  EXPECT_EQ(bad.exit_code, 2) << bad.err;
  EXPECT_THAT(bad.err, HasSubstr("--quantize int8 evaluates on one rank"));
  bad = Mtctl({"eval", checkpoint, "--data-path", data_, "--pipeline-model-parallel-size", "0"});
  EXPECT_EQ(bad.exit_code, 2) << bad.err;
  EXPECT_THAT(bad.err, HasSubstr("--pipeline-model-parallel-size 0: want an integer in [1, "));
}

// A generation job over two tensor-parallel ranks (one core each, two workers): the checkpoint,
// saved by a one-rank job, is resharded to TP 2; each rank decodes over its head of the two
// and its half of the vocabulary, TP rank 0 samples and streams. The greedy text is `mt-worker
// generate`'s token for token (fp32), and so are sampled texts with -n, --seed and
// --temperature (TP rank 0 draws from the generator as one device does).
class ShardedGenerateJobsTest : public InferenceJobsTest {
 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(JobFixture::SetUp());
    StartWorkers(2);
  }
};

// The samples' texts of `mt-worker generate -o json` (one object, "samples": [{"text": ...}])
// or of `mtctl -o json generate` (one object per line and sample), in sample order.
std::vector<std::string> SampleTexts(const std::string& json, bool per_line) {
  std::vector<std::string> texts;
  std::vector<std::string> objects;
  if (per_line) {
    objects = absl::StrSplit(json, '\n', absl::SkipEmpty());
  } else {
    objects.push_back(json);
  }
  for (const std::string& line : objects) {
    google::protobuf::Struct object;
    EXPECT_TRUE(google::protobuf::util::JsonStringToMessage(line, &object).ok()) << line;
    if (per_line) {
      const size_t sample = static_cast<size_t>(object.fields().at("sample").number_value());
      if (texts.size() <= sample) texts.resize(sample + 1);
      texts[sample] = object.fields().at("text").string_value();
      continue;
    }
    for (const auto& s : object.fields().at("samples").list_value().values()) {
      texts.push_back(s.struct_value().fields().at("text").string_value());
    }
  }
  return texts;
}

TEST_F(ShardedGenerateJobsTest, TwoTensorParallelRanksStreamTheLocalText) {
  const std::string tokenizer = TokenizerDir();
  if (tokenizer.empty()) GTEST_SKIP() << "no GPT-2 BPE files in $MT_ASSET_DIR";
  std::string directory;
  const std::string checkpoint = TrainAndSave(tokenizer, &directory);
  ASSERT_FALSE(checkpoint.empty());
  const std::string prompt = "Call me Ishmael.";
  const std::string local = LocalGreedyText(directory, prompt);
  ASSERT_GT(local.size(), 1u);  // the text and a newline

  // The stream of a TP-2 job: the job's id, the text piece by piece, the sample's end.
  mt::v1::GenerateTextRequest request = GreedyRequest(checkpoint, prompt);
  request.mutable_generate()->set_tensor_model_parallel_size(2);
  const Stream stream = ReadStream(request);
  ASSERT_TRUE(stream.status.ok()) << stream.status.error_message() << cluster_.Log("w0.log")
                                  << cluster_.Log("w1.log");
  const std::string& job = stream.job;
  ASSERT_FALSE(job.empty());
  for (const int32_t sample : stream.samples) EXPECT_EQ(sample, 0);
  ASSERT_EQ(stream.ends.size(), 1u);  // rank 0's only: rank 1 reports no text
  EXPECT_EQ(stream.ends[0].finish_reason(), "length");
  EXPECT_EQ(stream.ends[0].tokens(), 8);
  EXPECT_GT(stream.pieces, 1) << stream.text;
  EXPECT_EQ(stream.text + "\n", local);
  EXPECT_TRUE(cluster_.WaitForState(job, mt::v1::JOB_STATE_SUCCEEDED, absl::Seconds(30)))
      << EventText(job);
  auto got = cluster_.GetJob(job);
  ASSERT_TRUE(got.ok()) << got.status().message();
  EXPECT_EQ(got->layout().world_size(), 2);
  EXPECT_EQ(got->layout().tensor_model_parallel_size(), 2);
  EXPECT_EQ(got->placement_size(), 2);
  EXPECT_EQ(got->spec().parallel().tensor_model_parallel_size(), 2);

  // mtctl prints the same text; sampled texts (-n, --seed, --temperature, --top-k) are the
  // local command's too.
  CommandResult cli = Mtctl({"generate", checkpoint, "--prompt", prompt, "--temperature", "0",
                             "--max-new-tokens", "8", "--tensor-model-parallel-size", "2"});
  ASSERT_EQ(cli.exit_code, 0) << cli.err;
  EXPECT_EQ(cli.out, local);
  EXPECT_THAT(cli.err, HasSubstr("finished by length"));
  const std::vector<std::string> sampling = {
      "--prompt", prompt, "--temperature",    "0.8", "--top-k", "50",
      "--seed",   "3",    "--max-new-tokens", "8",   "-n",      "2"};
  std::vector<std::string> args = sampling;
  args.insert(args.end(), {"-o", "json"});
  const absl::StatusOr<CommandResult> sampled = LocalGenerate(directory, args);
  ASSERT_TRUE(sampled.ok()) << sampled.status().message();
  ASSERT_EQ(sampled->exit_code, 0) << sampled->err;
  const std::vector<std::string> want = SampleTexts(sampled->out, false);
  ASSERT_EQ(want.size(), 2u) << sampled->out;
  EXPECT_NE(want[0], want[1]);
  args = {"-o", "json", "generate", checkpoint};
  args.insert(args.end(), sampling.begin(), sampling.end());
  args.insert(args.end(), {"--tensor-model-parallel-size", "2"});
  cli = Mtctl(args);
  ASSERT_EQ(cli.exit_code, 0) << cli.err;
  EXPECT_EQ(SampleTexts(cli.out, true), want) << cli.out;

  // What a TP-2 generation cannot take, refused naming the fix.
  CommandResult bad =
      Mtctl({"generate", checkpoint, "--prompt", prompt, "--tensor-model-parallel-size", "3"});
  EXPECT_EQ(bad.exit_code, 2) << bad.err;
  EXPECT_THAT(bad.err, HasSubstr("--tensor-model-parallel-size 3: the checkpoint's 2 attention "
                                 "heads do not split evenly over 3 ranks"));
  bad = Mtctl({"generate", checkpoint, "--prompt", prompt, "--tensor-model-parallel-size", "2",
               "--quantize", "int8"});
  EXPECT_EQ(bad.exit_code, 2) << bad.err;
  EXPECT_THAT(bad.err, HasSubstr("--quantize int8 generates on one rank"));
  bad = Mtctl({"generate", checkpoint, "--prompt", prompt, "--tensor-model-parallel-size", "0"});
  EXPECT_EQ(bad.exit_code, 2) << bad.err;
  EXPECT_THAT(bad.err, HasSubstr("--tensor-model-parallel-size 0: want an integer in [1, "));
  bad = Mtctl({"generate", checkpoint, "--prompt", prompt, "--pipeline-model-parallel-size", "2"});
  EXPECT_EQ(bad.exit_code, 2) << bad.err;
  EXPECT_THAT(bad.err, HasSubstr("generation splits the model over tensor-parallel ranks only"));
}

}  // namespace
}  // namespace mt
