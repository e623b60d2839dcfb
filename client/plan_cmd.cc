// mtctl plan FILE | --megatron -- FLAGS     (layout and placement, nothing submitted)
// mtctl validate FILE | --megatron -- FLAGS (local check; prints the complete spec)
#include <cstdio>
#include <iostream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "client/rpc.h"
#include "client/spec_input.h"
#include "client/verbs.h"
#include "common/spec/yaml_spec.h"

namespace mt::client {
namespace {

std::string Groups(const google::protobuf::RepeatedPtrField<mt::v1::RankGroup>& groups,
                   size_t max_groups = 16) {
  std::vector<std::string> parts;
  for (int i = 0; i < groups.size() && parts.size() < max_groups; ++i) {
    parts.push_back(absl::StrCat("[", absl::StrJoin(groups[i].ranks(), ","), "]"));
  }
  std::string out = absl::StrJoin(parts, " ");
  if (static_cast<size_t>(groups.size()) > max_groups) {
    absl::StrAppend(&out, " ... (", groups.size(), " groups)");
  }
  return out;
}

}  // namespace

int RunPlan(const std::vector<std::string>& args, const GlobalOptions& options) {
  auto parsed = ReadSpecArgs(args);
  if (!parsed.ok()) return Fail(parsed.status());
  for (const auto& w : parsed->warnings) Notice(w);
  auto stub = NewStub(options);
  if (!stub.ok()) return Fail(stub.status());
  mt::v1::PlanJobRequest request;
  *request.mutable_spec() = parsed->spec;
  mt::v1::PlanJobResponse plan;
  absl::Status s = Call(stub->get(), &Stub::PlanJob, request, &plan, absl::Seconds(30));
  if (!s.ok()) return Fail(s);
  for (const auto& w : plan.warnings()) Notice(w);
  if (options.output != OutputFormat::kTable) {
    PrintStructured(plan, options.output);
    return plan.placeable() ? kExitOk : kExitFailed;
  }
  const mt::v1::Layout& l = plan.layout();
  std::cout << "layout       world " << l.world_size() << " = tp " << l.tensor_model_parallel_size()
            << " x cp " << l.context_parallel_size() << " x pp " << l.pipeline_model_parallel_size()
            << " x dp " << l.data_parallel_size() << ", " << l.num_micro_batches()
            << " micro-batches per step\n";
  std::cout << "tp groups    " << Groups(l.tensor_groups()) << "\n";
  std::cout << "dp groups    " << Groups(l.data_groups()) << "\n";
  std::cout << "pp groups    " << Groups(l.pipeline_groups()) << "\n";
  for (int s = 0; s < l.stage_layers_size(); ++s) {
    std::cout << "stage " << s << "      layers " << absl::StrJoin(l.stage_layers(s).layers(), ",")
              << "\n";
  }
  std::cout << "state/rank   "
            << absl::StrFormat("%.1f", plan.estimated_state_bytes_per_rank() / 1048576.0)
            << " MiB (parameters, gradients, optimizer)\n";
  if (!plan.placeable()) {
    std::cout << "placement    not placeable now: " << plan.reason() << "\n";
    return kExitFailed;
  }
  std::vector<std::vector<std::string>> rows;
  for (const auto& p : plan.placement()) {
    const auto& c = p.coordinates();
    rows.push_back({absl::StrCat(c.rank()), absl::StrCat(c.tp()), absl::StrCat(c.dp()),
                    absl::StrCat(c.pp()), p.worker_id(), p.node(),
                    p.gpu_index() < 0 ? "cpu" : absl::StrCat(p.gpu_index())});
  }
  std::cout << "\n" << FormatTable({"RANK", "TP", "DP", "PP", "WORKER", "NODE", "GPU"}, rows);
  return kExitOk;
}

int RunValidate(const std::vector<std::string>& args, const GlobalOptions& options) {
  auto parsed = ReadSpecArgs(args);
  if (!parsed.ok()) return Fail(parsed.status());
  for (const auto& w : parsed->warnings) Notice(w);
  if (options.output == OutputFormat::kJson) {
    PrintStructured(parsed->spec, options.output);
  } else {
    std::cout << spec::SpecToYaml(parsed->spec);
  }
  return kExitOk;
}

}  // namespace mt::client
