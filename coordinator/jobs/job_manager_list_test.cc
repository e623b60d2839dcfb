// JobManager::List over a real Store: the filters (states, name prefix, owner), the total
// count of each, and the pages a client walks with page_size and page_token.
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/spec/yaml_spec.h"
#include "coordinator/jobs/job_manager.h"
#include "coordinator/jobs/job_manager_testing.h"
#include "gtest/gtest.h"

namespace mt::coordinator {
namespace {

class JobManagerListTest : public JobManagerTestBase {
 protected:
  // No workers: every job stays PENDING unless cancelled.
  void SetUp() override { ASSERT_NO_FATAL_FAILURE(SetUpManager("jm_list", 0)); }

  std::string Submit(const std::string& name, const std::string& owner) {
    auto parsed = spec::ParseYamlSpec(absl::StrCat(
        "name: ", name,
        "\nmodel: {num_layers: 2, hidden_size: 32, num_attention_heads: 2, seq_length: 16}\n"
        "training: {micro_batch_size: 2, global_batch_size: 2, train_iters: 20, lr: 1.0e-3}\n"
        "data:\n  data_path: /data/x\n  tokenizer: {vocab_file: /v.json, merge_file: /m.txt}\n"));
    EXPECT_TRUE(parsed.ok()) << parsed.status();
    auto r = jobs_->Submit(parsed->spec, "", owner);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? r->job().id() : "";
  }

  // Walks every page of `request` with `page_size`: the ids in order, and each page's total.
  std::vector<std::string> Walk(mt::v1::ListJobsRequest request, int page_size,
                                std::vector<int64_t>* totals, int* pages) {
    std::vector<std::string> ids;
    request.set_page_size(page_size);
    *pages = 0;
    for (int guard = 0; guard < 20; ++guard) {
      auto page = jobs_->List(request);
      EXPECT_TRUE(page.ok()) << page.status();
      if (!page.ok()) break;
      ++*pages;
      totals->push_back(page->total_count());
      EXPECT_LE(page->jobs_size(), page_size);
      for (const auto& j : page->jobs()) ids.push_back(j.id());
      if (page->next_page_token().empty()) break;
      EXPECT_EQ(page->jobs_size(), page_size) << "a short page must be the last";
      request.set_page_token(page->next_page_token());
    }
    return ids;
  }
};

TEST_F(JobManagerListTest, FiltersCountAndPageAlike) {
  // a0 b1 a2 b3 a4 b5 a6, owners alice/bob alternating; a2 cancelled.
  std::vector<std::string> id;
  for (int i = 0; i < 7; ++i) {
    id.push_back(Submit(absl::StrCat(i % 2 == 0 ? "a" : "b", i), i % 2 == 0 ? "alice" : "bob"));
  }
  ASSERT_TRUE(jobs_->Cancel(id[2], "test", "alice", /*no_save=*/true).ok());

  struct Case {
    std::string what;
    mt::v1::ListJobsRequest request;
    int page_size;
    std::vector<std::string> want;
    int want_pages;
  };
  std::vector<Case> cases;
  cases.push_back({"all", {}, 3, id, 3});
  cases.push_back({"all, one page exactly", {}, 7, id, 1});
  mt::v1::ListJobsRequest pending;
  pending.add_states(mt::v1::JOB_STATE_PENDING);
  cases.push_back({"pending", pending, 2, {id[0], id[1], id[3], id[4], id[5], id[6]}, 3});
  mt::v1::ListJobsRequest a;
  a.set_name_prefix("a");
  // Four match: two full pages, and no token after the second (nothing more matches).
  cases.push_back({"name a", a, 2, {id[0], id[2], id[4], id[6]}, 2});
  mt::v1::ListJobsRequest a_pending = a;
  a_pending.add_states(mt::v1::JOB_STATE_PENDING);
  cases.push_back({"name a, pending", a_pending, 2, {id[0], id[4], id[6]}, 2});
  mt::v1::ListJobsRequest bob;
  bob.set_owner("bob");
  cases.push_back({"owner bob", bob, 5, {id[1], id[3], id[5]}, 1});
  mt::v1::ListJobsRequest bob_cancelled = bob;
  bob_cancelled.add_states(mt::v1::JOB_STATE_CANCELLED);
  cases.push_back({"owner bob, cancelled", bob_cancelled, 5, {}, 1});
  mt::v1::ListJobsRequest cancelled_or_pending;
  cancelled_or_pending.add_states(mt::v1::JOB_STATE_CANCELLED);
  cancelled_or_pending.add_states(mt::v1::JOB_STATE_PENDING);
  cases.push_back({"cancelled or pending", cancelled_or_pending, 4, id, 2});

  for (const Case& c : cases) {
    std::vector<int64_t> totals;
    int pages = 0;
    EXPECT_EQ(Walk(c.request, c.page_size, &totals, &pages), c.want) << c.what;
    EXPECT_EQ(pages, c.want_pages) << c.what;
    for (int64_t t : totals) EXPECT_EQ(t, static_cast<int64_t>(c.want.size())) << c.what;
  }
}

TEST_F(JobManagerListTest, BadRequestsNameTheField) {
  Submit("x", "");
  mt::v1::ListJobsRequest r;
  r.set_page_token("not-a-number");
  EXPECT_EQ(jobs_->List(r).status().code(), absl::StatusCode::kInvalidArgument);
  r.clear_page_token();
  r.set_page_size(1001);
  auto s = jobs_->List(r).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("page_size"), absl::string_view::npos) << s;
  r.set_page_size(0);
  r.set_owner(std::string(65, 'o'));
  s = jobs_->List(r).status();
  EXPECT_NE(s.message().find("owner"), absl::string_view::npos) << s;
}

}  // namespace
}  // namespace mt::coordinator
