// The page loop of mtctl's List* calls (rpc.h) against fake page sources.
#include "client/rpc.h"

#include <map>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace mt::client {
namespace {

using ::testing::ElementsAre;

TEST(RpcTest, ReadAllPagesFollowsTokensToTheEnd) {
  const std::map<std::string, std::string> next = {{"", "p2"}, {"p2", "p3"}, {"p3", ""}};
  std::vector<std::string> asked;
  absl::Status s = ReadAllPages([&](const std::string& token) -> absl::StatusOr<std::string> {
    asked.push_back(token);
    return next.at(token);
  });
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_THAT(asked, ElementsAre("", "p2", "p3"));
}

TEST(RpcTest, ReadAllPagesStopsAtTheFirstError) {
  int calls = 0;
  absl::Status s = ReadAllPages([&](const std::string&) -> absl::StatusOr<std::string> {
    if (++calls == 2) return absl::UnavailableError("coordinator gone");
    return std::string("more");
  });
  EXPECT_EQ(s, absl::UnavailableError("coordinator gone"));
  EXPECT_EQ(calls, 2);
}

// A fake coordinator: `ids` split into pages of `page` jobs.
struct FakeJobPages {
  std::vector<std::string> ids;
  int page = 2;
  std::vector<mt::v1::ListJobsRequest> requests;

  absl::Status operator()(const mt::v1::ListJobsRequest& request,
                          mt::v1::ListJobsResponse* response) {
    requests.push_back(request);
    const size_t start = request.page_token().empty() ? 0 : std::stoul(request.page_token());
    for (size_t i = start; i < ids.size() && i < start + page; ++i) {
      response->add_jobs()->set_id(ids[i]);
    }
    if (start + page < ids.size()) response->set_next_page_token(std::to_string(start + page));
    response->set_total_count(static_cast<int64_t>(ids.size()));
    return absl::OkStatus();
  }
};

TEST(RpcTest, ListAllAppendsEveryPageAndKeepsTheFilters) {
  FakeJobPages fake{{"a", "b", "c", "d", "e"}, 2, {}};
  mt::v1::ListJobsRequest filter;
  filter.add_states(mt::v1::JOB_STATE_RUNNING);
  absl::StatusOr<mt::v1::ListJobsResponse> all =
      ListAll<mt::v1::ListJobsRequest, mt::v1::ListJobsResponse>(
          filter, [&](const auto& request, auto* page) { return fake(request, page); });
  ASSERT_TRUE(all.ok()) << all.status();
  std::vector<std::string> ids;
  for (const auto& j : all->jobs()) ids.push_back(j.id());
  EXPECT_THAT(ids, ElementsAre("a", "b", "c", "d", "e"));
  EXPECT_EQ(all->total_count(), 5);
  EXPECT_EQ(all->next_page_token(), "");
  ASSERT_EQ(fake.requests.size(), 3u);
  for (const auto& r : fake.requests) {
    EXPECT_EQ(r.page_size(), kPageSize);
    EXPECT_THAT(r.states(), ElementsAre(mt::v1::JOB_STATE_RUNNING));
  }
  EXPECT_EQ(fake.requests[2].page_token(), "4");
}

TEST(RpcTest, ListAllOfNothingIsOnePage) {
  FakeJobPages fake{{}, 2, {}};
  auto all = ListAll<mt::v1::ListJobsRequest, mt::v1::ListJobsResponse>(
      mt::v1::ListJobsRequest(),
      [&](const auto& request, auto* page) { return fake(request, page); });
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->jobs_size(), 0);
  EXPECT_EQ(fake.requests.size(), 1u);
}

TEST(RpcTest, ListAllReturnsTheFailingPagesError) {
  int calls = 0;
  auto all = ListAll<mt::v1::ListJobsRequest, mt::v1::ListJobsResponse>(
      mt::v1::ListJobsRequest(),
      [&](const mt::v1::ListJobsRequest&, mt::v1::ListJobsResponse* page) -> absl::Status {
        if (++calls == 2) return absl::DeadlineExceededError("slow");
        page->add_jobs()->set_id("x");
        page->set_next_page_token("next");
        return absl::OkStatus();
      });
  EXPECT_EQ(all.status(), absl::DeadlineExceededError("slow"));
}

}  // namespace
}  // namespace mt::client
