// StoreExchange over a real c10d TCPStore on loopback: rank 0 serves it, each rank talks
// through a client connection of its own, as the job's ranks do (parallel/dist.cc).
#include "worker/checkpoint/store_exchange.h"

#include <thread>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace mt::checkpoint {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

class StoreExchangeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    c10d::TCPStoreOptions o;
    o.port = 0;
    o.isServer = true;
    o.waitWorkers = false;
    o.timeout = std::chrono::seconds(20);
    server_ = c10::make_intrusive<c10d::TCPStore>("127.0.0.1", o);
  }
  c10::intrusive_ptr<c10d::Store> Client() {
    c10d::TCPStoreOptions o;
    o.port = server_->getPort();
    o.isServer = false;
    o.waitWorkers = false;
    o.timeout = std::chrono::seconds(20);
    return c10::make_intrusive<c10d::TCPStore>("127.0.0.1", o);
  }
  c10::intrusive_ptr<c10d::TCPStore> server_;
};

TEST_F(StoreExchangeTest, RankZeroGathersEveryRanksResultInRankOrder) {
  StoreExchange rank0(Client());
  StoreExchange rank1(Client());
  StoreExchange rank2(Client());
  // The others publish while rank 0 already waits.
  std::thread late([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    ASSERT_TRUE(rank2.Publish(20, 2, std::string("two\0bytes", 9)).ok());
    ASSERT_TRUE(rank1.Publish(20, 1, "one").ok());
  });
  ASSERT_TRUE(rank0.Publish(20, 0, "zero").ok());
  auto gathered = rank0.Gather(20, 3, absl::Seconds(20));
  late.join();
  ASSERT_TRUE(gathered.ok()) << gathered.status();
  EXPECT_THAT(*gathered, ElementsAre("zero", "one", std::string("two\0bytes", 9)));
  // Gathered results are removed from the job's store.
  EXPECT_FALSE(server_->check({StoreExchange::Key(20, 0)}));
  EXPECT_FALSE(server_->check({StoreExchange::Key(20, 2)}));
}

TEST_F(StoreExchangeTest, NamesTheRanksMissingAtTheDeadline) {
  StoreExchange rank0(Client());
  StoreExchange rank2(Client());
  ASSERT_TRUE(rank0.Publish(40, 0, "zero").ok());
  ASSERT_TRUE(rank2.Publish(40, 2, "two").ok());
  ASSERT_TRUE(rank2.Publish(39, 1, "another step").ok());
  auto gathered = rank0.Gather(40, 4, absl::Milliseconds(300));
  ASSERT_EQ(gathered.status().code(), absl::StatusCode::kDeadlineExceeded) << gathered.status();
  EXPECT_THAT(std::string(gathered.status().message()),
              HasSubstr("ranks 1, 3 did not report save 40"));
}

TEST_F(StoreExchangeTest, ALostStoreIsAnErrorNotAnException) {
  StoreExchange rank1(Client());
  server_.reset();  // rank 0's process is gone
  const absl::Status s = rank1.Gather(60, 2, absl::Seconds(5)).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("gathering save 60 through the job's store"));
}

}  // namespace
}  // namespace mt::checkpoint
