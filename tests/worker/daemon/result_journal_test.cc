// The worker's result journal on its own: entries come back in the order
// written, removed ones do not, a bad file is moved aside (never a crash),
// and the bounds hold.

#include "worker/daemon/result_journal.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "gtest/gtest.h"

namespace headroom::worker {
namespace {

namespace fs = std::filesystem;

v1::ProbeResult Result(const std::string& key, uint32_t batch) {
  v1::ProbeResult result;
  result.set_key(key);
  result.set_probe_id("p-1");
  result.set_assignment_id("p-1.1");
  result.mutable_batch()->set_batch(batch);
  result.mutable_batch()->set_peak_allocated_gb(batch * 0.5);
  return result;
}

class ResultJournalTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "/journal-test-" + std::to_string(getpid()) +
           "-" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name();
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::unique_ptr<ResultJournal> Open(ResultJournal::Limits limits = {}) {
    auto journal = ResultJournal::Open(dir_ + "/sim-l4", limits);
    EXPECT_TRUE(journal.ok()) << journal.status();
    return journal.ok() ? *std::move(journal) : nullptr;
  }

  std::string dir_;
};

TEST_F(ResultJournalTest, EntriesSurviveAReopenInOrderUntilRemoved) {
  {
    auto journal = Open();
    ASSERT_NE(journal, nullptr);
    EXPECT_TRUE(journal->Load().empty());
    ASSERT_TRUE(journal->Add(Result("p-1/8/0", 8)).ok());
    ASSERT_TRUE(journal->Add(Result("p-1/16/0", 16)).ok());
    ASSERT_TRUE(journal->Add(Result("p-1/32/0", 32)).ok());
    // The same key again replaces its entry.
    ASSERT_TRUE(journal->Add(Result("p-1/8/0", 8)).ok());
    journal->Remove("p-1/16/0");
    journal->Remove("never-written");
    EXPECT_EQ(journal->size(), 2u);
  }
  auto journal = Open();
  ASSERT_NE(journal, nullptr);
  const std::vector<v1::ProbeResult> loaded = journal->Load();
  ASSERT_EQ(loaded.size(), 2u);
  EXPECT_EQ(loaded[0].key(), "p-1/32/0");
  EXPECT_EQ(loaded[1].key(), "p-1/8/0");
  EXPECT_EQ(loaded[1].batch().peak_allocated_gb(), 4);
  // Written after a reopen, an entry sorts after the loaded ones.
  ASSERT_TRUE(journal->Add(Result("p-1/64/0", 64)).ok());
  auto again = Open();
  const std::vector<v1::ProbeResult> reloaded = again->Load();
  ASSERT_EQ(reloaded.size(), 3u);
  EXPECT_EQ(reloaded[2].key(), "p-1/64/0");
}

TEST_F(ResultJournalTest, UnreadableEntriesAreMovedAside) {
  {
    auto journal = Open();
    ASSERT_TRUE(journal->Add(Result("good", 8)).ok());
  }
  std::ofstream(dir_ + "/sim-l4/r-00000000000000000007.pb") << "not a proto";
  std::ofstream(dir_ + "/sim-l4/.tmp-r-00000000000000000009.pb") << "half";
  auto journal = Open();
  const std::vector<v1::ProbeResult> loaded = journal->Load();
  ASSERT_EQ(loaded.size(), 1u);
  EXPECT_EQ(loaded[0].key(), "good");
  EXPECT_TRUE(
      fs::exists(dir_ + "/sim-l4/unreadable/r-00000000000000000007.pb"));
  EXPECT_FALSE(fs::exists(dir_ + "/sim-l4/r-00000000000000000007.pb"));
  EXPECT_FALSE(fs::exists(dir_ + "/sim-l4/.tmp-r-00000000000000000009.pb"));
}

TEST_F(ResultJournalTest, IsBoundedInEntriesAndBytes) {
  ResultJournal::Limits limits;
  limits.max_entries = 2;
  limits.max_entry_bytes = 1000;
  {
    auto journal = Open(limits);
    ASSERT_TRUE(journal->Add(Result("a", 1)).ok());
    ASSERT_TRUE(journal->Add(Result("b", 2)).ok());
    const absl::Status full = journal->Add(Result("c", 3));
    EXPECT_EQ(full.code(), absl::StatusCode::kResourceExhausted);
    EXPECT_NE(full.message().find("2 entries"), std::string::npos) << full;
    // Replacing a held key is not a new entry.
    EXPECT_TRUE(journal->Add(Result("a", 1)).ok());
    v1::ProbeResult big = Result("big", 4);
    big.set_details_json(std::string(2000, 'x'));
    EXPECT_EQ(journal->Add(big).code(), absl::StatusCode::kResourceExhausted);
  }
  limits.max_entries = 1;
  auto journal = Open(limits);
  EXPECT_EQ(journal->Load().size(), 1u);
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_ + "/sim-l4/unreadable"),
                          fs::directory_iterator()),
            1);
}

TEST_F(ResultJournalTest, ADirectoryThatCannotBeMadeIsAnError) {
  std::ofstream(dir_ + "-file") << "a file, not a directory";
  auto journal = ResultJournal::Open(dir_ + "-file/sub", {});
  EXPECT_FALSE(journal.ok());
  EXPECT_NE(journal.status().message().find(dir_ + "-file/sub"),
            std::string::npos)
      << journal.status();
  fs::remove(dir_ + "-file");
}

}  // namespace
}  // namespace headroom::worker
