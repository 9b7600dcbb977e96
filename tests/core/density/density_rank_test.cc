#include "core/density/density_rank.h"

#include <cmath>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include "base/json_io.h"
#include "gmock/gmock.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"
#include "io/files.h"

namespace headroom {
namespace {

using ::testing::HasSubstr;

const std::string kRoot = HEADROOM_SOURCE_DIR;
constexpr double kRelTol = 1e-12;

bool RelClose(double a, double b) {
  return std::abs(a - b) <= kRelTol * std::max(std::abs(a), std::abs(b));
}

// Every double field of two messages of one type equal to a relative 1e-12,
// every other singular field exactly, but for the fields in `skip`; `what`
// names the pair in failures.
void ExpectFieldsClose(const google::protobuf::Message& expected,
                       const google::protobuf::Message& got,
                       const std::string& what,
                       const std::set<std::string>& skip = {}) {
  const google::protobuf::Descriptor* descriptor = expected.GetDescriptor();
  const google::protobuf::Reflection* reflection = expected.GetReflection();
  for (int i = 0; i < descriptor->field_count(); ++i) {
    const google::protobuf::FieldDescriptor* field = descriptor->field(i);
    ASSERT_FALSE(field->is_repeated()) << field->name();
    if (skip.count(field->name()) > 0) continue;
    using Type = google::protobuf::FieldDescriptor::CppType;
    switch (field->cpp_type()) {
      case Type::CPPTYPE_DOUBLE: {
        const double e = reflection->GetDouble(expected, field);
        const double g = reflection->GetDouble(got, field);
        EXPECT_TRUE(RelClose(e, g))
            << what << " " << field->name() << ": file " << e << ", got " << g;
        break;
      }
      case Type::CPPTYPE_STRING:
        EXPECT_EQ(reflection->GetString(expected, field),
                  reflection->GetString(got, field))
            << what << " " << field->name();
        break;
      case Type::CPPTYPE_INT32:
        EXPECT_EQ(reflection->GetInt32(expected, field),
                  reflection->GetInt32(got, field))
            << what << " " << field->name();
        break;
      case Type::CPPTYPE_BOOL:
        EXPECT_EQ(reflection->GetBool(expected, field),
                  reflection->GetBool(got, field))
            << what << " " << field->name();
        break;
      default:
        ADD_FAILURE() << "unexpected field type " << field->name();
    }
  }
}

void ExpectListClose(
    const google::protobuf::RepeatedPtrField<v1::DensityRun>& expected,
    const google::protobuf::RepeatedPtrField<v1::DensityRun>& got,
    const std::string& list) {
  ASSERT_EQ(expected.size(), got.size()) << list;
  for (int i = 0; i < expected.size(); ++i) {
    ExpectFieldsClose(expected[i], got[i],
                      list + "[" + std::to_string(i) + "] " + expected[i].id());
  }
}

std::vector<std::string> IdsOf(
    const google::protobuf::RepeatedPtrField<v1::DensityRun>& runs) {
  std::vector<std::string> ids;
  for (const v1::DensityRun& run : runs) ids.push_back(run.id());
  return ids;
}

class DensityLeaderboardTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto text = ReadFile(kRoot + "/data/density-leaderboard.json");
    ASSERT_TRUE(text.ok()) << text.status();
    text_ = *text;
    // No unknown field allowed: every name of the file maps onto the schema.
    const absl::Status parsed = ParseJson(text_, "density-leaderboard.json",
                                          /*ignore_unknown=*/false, &board_);
    ASSERT_TRUE(parsed.ok()) << parsed;
    // The file's runs: every run of its four lists, once each.
    std::set<std::string> seen;
    for (const auto* list : {&board_.top(), &board_.top_speed(),
                             &board_.top_avail(), &board_.top_mix()}) {
      for (const v1::DensityRun& run : *list) {
        if (seen.insert(run.id()).second) listed_.push_back(RawOf(run));
      }
    }
  }

  std::string text_;
  v1::DensityLeaderboard board_;
  std::vector<v1::DensityRawRun> listed_;
};

// Printed back, the parsed file is the file: same names, same values, no
// field added or lost.
TEST_F(DensityLeaderboardTest, SchemaReproducesTheFilesFieldNames) {
  google::protobuf::Value file_tree;
  ASSERT_TRUE(ParseJson(text_, "file", false, &file_tree).ok());
  google::protobuf::Value printed_tree;
  ASSERT_TRUE(
      ParseJson(ToJson(board_, false), "printed", false, &printed_tree).ok());
  std::string diff;
  google::protobuf::util::MessageDifferencer differencer;
  differencer.ReportDifferencesToString(&diff);
  EXPECT_TRUE(differencer.Compare(file_tree, printed_tree)) << diff;
  EXPECT_EQ(listed_.size(), 52u);
  EXPECT_EQ(board_.n(), 10600);
}

// The golden test of issue 8: given the file's peaks and acc_champ, every
// field of every run in top, top_speed, top_avail and top_mix, and gold_std,
// gold_modes and peak_dens_*, equal the file's.
TEST_F(DensityLeaderboardTest, ReproducesEveryDerivedFieldGivenFilePeaks) {
  const v1::DensityLeaderboard got =
      RankAgainstPeaks(listed_, PeaksOf(board_), DensityListLengths{});
  ASSERT_EQ(got.top_size(), 40);
  ASSERT_EQ(got.top_speed_size(), 12);
  ExpectListClose(board_.top(), got.top(), "top");
  ExpectListClose(board_.top_speed(), got.top_speed(), "top_speed");
  ExpectListClose(board_.top_avail(), got.top_avail(), "top_avail");
  ExpectListClose(board_.top_mix(), got.top_mix(), "top_mix");
  ASSERT_TRUE(got.has_gold_std());
  ExpectFieldsClose(board_.gold_std(), got.gold_std(), "gold_std");
  EXPECT_EQ(got.gold_std().id(), "rmsnorm|uint4|TweenSplitSparse|lr=20k");
  ASSERT_EQ(got.gold_modes_size(), board_.gold_modes_size());
  for (int i = 0; i < got.gold_modes_size(); ++i) {
    ExpectFieldsClose(board_.gold_modes(i), got.gold_modes(i),
                      "gold_modes[" + std::to_string(i) + "]");
  }
  EXPECT_TRUE(RelClose(got.peak_dens_acc(), board_.peak_dens_acc()));
  EXPECT_TRUE(RelClose(got.peak_dens_thru(), board_.peak_dens_thru()));
  EXPECT_TRUE(RelClose(got.peak_dens_avail(), board_.peak_dens_avail()));
}

// Ranked from scratch, the file's runs and champions give the file's peaks
// (all but fast_thru and best_avail, whose runs the file does not list), its
// champions, the same lists in the same order, gold_std and gold_modes.
TEST_F(DensityLeaderboardTest, RankDensityFindsTheFilesPeaksAndChampions) {
  v1::RankDensityRequest request;
  std::set<std::string> seen;
  for (const v1::DensityRawRun* run :
       {&board_.champ(), &board_.acc_champ(), &board_.soft_champ(),
        &board_.live_champ()}) {
    if (seen.insert(run->id()).second) *request.add_runs() = *run;
  }
  for (const v1::DensityRawRun& run : listed_) {
    if (seen.insert(run.id()).second) *request.add_runs() = run;
  }
  auto response = RankDensity(request);
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_EQ(response->empty_reason(), "");
  const v1::DensityLeaderboard& got = response->leaderboard();
  EXPECT_EQ(got.n(), request.runs_size());
  EXPECT_EQ(got.peak_acc(), board_.peak_acc());
  EXPECT_EQ(got.peak_score(), board_.peak_score());
  EXPECT_EQ(got.peak_soft(), board_.peak_soft());
  EXPECT_EQ(got.peak_thru(), board_.peak_thru());
  EXPECT_EQ(got.peak_avail(), board_.peak_avail());
  using google::protobuf::util::MessageDifferencer;
  EXPECT_TRUE(MessageDifferencer::Equals(got.champ(), board_.champ()));
  EXPECT_TRUE(MessageDifferencer::Equals(got.acc_champ(), board_.acc_champ()));
  EXPECT_TRUE(
      MessageDifferencer::Equals(got.soft_champ(), board_.soft_champ()));
  EXPECT_TRUE(
      MessageDifferencer::Equals(got.live_champ(), board_.live_champ()));
  // The champion is a trap: the fastest run listed, yet it sets no peak_thru.
  EXPECT_EQ(got.fast_id(), board_.champ().id());
  EXPECT_GT(got.fast_thru(), got.peak_thru());
  EXPECT_EQ(IdsOf(got.top()), IdsOf(board_.top()));
  EXPECT_EQ(IdsOf(got.top_speed()), IdsOf(board_.top_speed()));
  EXPECT_EQ(IdsOf(got.top_avail()), IdsOf(board_.top_avail()));
  EXPECT_EQ(IdsOf(got.top_mix()), IdsOf(board_.top_mix()));
  // rel_fast and rel_duty are against fast_thru and best_avail, which differ.
  ExpectFieldsClose(board_.gold_std(), got.gold_std(), "gold_std",
                    {"rel_fast", "rel_duty"});
  ASSERT_EQ(got.gold_modes_size(), 2);
  for (int i = 0; i < got.gold_modes_size(); ++i) {
    ExpectFieldsClose(board_.gold_modes(i), got.gold_modes(i),
                      "gold_modes[" + std::to_string(i) + "]");
  }
}

v1::DensityRawRun RawRun(const std::string& id, double acc, double soft,
                         double thru, double avail, double ram_kib) {
  v1::DensityRawRun run;
  run.set_id(id);
  run.set_arch(id);
  run.set_dtype("float32");
  run.set_mode(id == "trap" ? "Step" : "Tween");
  run.set_avg_accuracy(acc);
  run.set_soft_acc(soft);
  run.set_throughput(thru);
  run.set_availability(avail);
  run.set_ram_kib(ram_kib);
  run.set_score(thru * avail * acc / 10000);
  return run;
}

// Four runs worked by hand: acc_champ breaks the accuracy tie on soft_acc,
// the trap sets fast_thru and best_avail but not peak_thru or peak_avail.
v1::RankDensityRequest SmallRequest() {
  v1::RankDensityRequest request;
  *request.add_runs() = RawRun("a", 50, 10, 100, 50, 1.0);
  *request.add_runs() = RawRun("b", 45, 0, 200, 40, 0.5);
  *request.add_runs() = RawRun("trap", 10, 0, 1000, 90, 0.1);
  *request.add_runs() = RawRun("d", 50, 5, 200, 50, 0.2);
  return request;
}

TEST(DensityRankTest, WorkedExample) {
  auto response = RankDensity(SmallRequest());
  ASSERT_TRUE(response.ok()) << response.status();
  const v1::DensityLeaderboard& board = response->leaderboard();
  EXPECT_EQ(board.acc_champ().id(), "a");
  EXPECT_EQ(board.champ().id(), "trap");
  EXPECT_EQ(board.live_champ().id(), "d");
  EXPECT_EQ(board.peak_thru(), 200);
  EXPECT_EQ(board.peak_avail(), 50);
  EXPECT_EQ(board.fast_thru(), 1000);
  EXPECT_EQ(board.fast_id(), "trap");
  EXPECT_EQ(board.best_avail(), 90);
  EXPECT_EQ(board.n(), 4);
  // d: every pillar at 1 in a fifth of a's memory: gold, lpd = shrink = 5.
  ASSERT_EQ(IdsOf(board.top()),
            (std::vector<std::string>{"d", "b", "a", "trap"}));
  const v1::DensityRun& d = board.top(0);
  EXPECT_DOUBLE_EQ(d.q(), 1);
  EXPECT_DOUBLE_EQ(d.ram_frac(), 0.2);
  EXPECT_DOUBLE_EQ(d.lpd(), 5);
  EXPECT_EQ(d.pillars(), 3);
  EXPECT_EQ(d.band(), "keep");
  EXPECT_TRUE(d.gold());
  // b: rel (0.9, 1, 0.8), shrink 2.
  const v1::DensityRun& b = board.top(1);
  EXPECT_DOUBLE_EQ(b.q(), std::cbrt(0.9 * 1 * 0.8));
  EXPECT_DOUBLE_EQ(b.lpd(), 2 * std::cbrt(0.72));
  EXPECT_DOUBLE_EQ(b.rel_fast(), 0.2);
  EXPECT_DOUBLE_EQ(b.rel_duty(), 40.0 / 90);
  EXPECT_DOUBLE_EQ(b.dens_avail(), 1.6);
  EXPECT_EQ(b.pillars(), 3);
  EXPECT_FALSE(b.gold());
  // a: rel (1, 0.5, 1): two pillars, keep.
  EXPECT_EQ(board.top(2).band(), "keep");
  EXPECT_EQ(board.top(2).pillars(), 2);
  // The trap learns nothing: lpd 0, no band, in no learners' list.
  const v1::DensityRun& trap = board.top(3);
  EXPECT_EQ(trap.lpd(), 0);
  EXPECT_EQ(trap.band(), "\xE2\x80\x94");
  EXPECT_DOUBLE_EQ(trap.rel_thru(), 5);
  EXPECT_EQ(IdsOf(board.top_speed()),
            (std::vector<std::string>{"d", "b", "a"}));
  EXPECT_EQ(IdsOf(board.top_avail()),
            (std::vector<std::string>{"d", "a", "b"}));
  EXPECT_EQ(board.gold_std().id(), "d");
  ASSERT_EQ(board.gold_modes_size(), 1);
  EXPECT_EQ(board.gold_modes(0).mode(), "Tween");
  EXPECT_EQ(board.gold_modes(0).n(), 3);
  EXPECT_EQ(board.gold_modes(0).smallest(), "d");
  EXPECT_EQ(board.gold_modes(0).fastest(), "d");
  EXPECT_EQ(board.gold_modes(0).min_ram_kib(), 0.2);
  EXPECT_DOUBLE_EQ(board.peak_dens_acc(), 5);
}

TEST(DensityRankTest, ListLengthsAreConfigurable) {
  v1::RankDensityRequest request = SmallRequest();
  request.set_top_n(2);
  request.set_top_speed_n(1);
  request.set_top_avail_n(0);
  auto response = RankDensity(request);
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_EQ(response->leaderboard().top_size(), 2);
  EXPECT_EQ(response->leaderboard().top_speed_size(), 1);
  EXPECT_EQ(response->leaderboard().top_avail_size(), 0);
  EXPECT_EQ(response->leaderboard().top_mix_size(), 3);

  request.set_top_mix_n(-1);
  auto bad = RankDensity(request);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("top_mix_n"));
}

// Filters choose the runs first; peaks are then those of the chosen runs.
TEST(DensityRankTest, FiltersRankOnlyMatchingRuns) {
  v1::RankDensityRequest request = SmallRequest();
  request.set_mode("Tween");
  auto response = RankDensity(request);
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_EQ(response->leaderboard().n(), 3);
  EXPECT_EQ(response->leaderboard().fast_thru(), 200);

  request.set_arch("nosuch");
  auto none = RankDensity(request);
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_EQ(none->leaderboard().top_size(), 0);
  EXPECT_THAT(none->empty_reason(), HasSubstr("arch=nosuch"));
}

TEST(DensityRankTest, AllZeroAccuracyGivesAnEmptyRankingWithTheReason) {
  v1::RankDensityRequest request;
  *request.add_runs() = RawRun("x", 0, 3, 100, 50, 1);
  *request.add_runs() = RawRun("y", 0, 1, 200, 40, 2);
  auto response = RankDensity(request);
  ASSERT_TRUE(response.ok()) << response.status();
  const v1::DensityLeaderboard& board = response->leaderboard();
  EXPECT_EQ(board.top_size(), 0);
  EXPECT_EQ(board.top_mix_size(), 0);
  EXPECT_FALSE(board.has_gold_std());
  EXPECT_EQ(board.n(), 2);
  EXPECT_EQ(board.peak_acc(), 0);
  EXPECT_EQ(board.fast_id(), "y");
  EXPECT_THAT(response->empty_reason(), HasSubstr("avg_accuracy 0"));
}

TEST(DensityRankTest, NoRunsGivesAnEmptyRankingWithTheReason) {
  auto response = RankDensity(v1::RankDensityRequest{});
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_EQ(response->leaderboard().top_size(), 0);
  EXPECT_EQ(response->empty_reason(), "no runs to rank");
}

// Each bad run is refused with a message naming the run and the field.
struct BadRunCase {
  std::string name;
  void (*spoil)(v1::DensityRawRun*);
  std::string message;
};

class BadRunTest : public ::testing::TestWithParam<BadRunCase> {};

TEST_P(BadRunTest, NamesRunAndField) {
  v1::RankDensityRequest request = SmallRequest();
  GetParam().spoil(request.mutable_runs(1));
  auto response = RankDensity(request);
  ASSERT_FALSE(response.ok());
  EXPECT_EQ(response.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(response.status().message(), GetParam().message);
}

INSTANTIATE_TEST_SUITE_P(
    DensityRankTest, BadRunTest,
    ::testing::Values(
        BadRunCase{"MissingAccuracy",
                   [](v1::DensityRawRun* r) { r->clear_avg_accuracy(); },
                   "run 1 (b): missing field avg_accuracy"},
        BadRunCase{"MissingScore",
                   [](v1::DensityRawRun* r) { r->clear_score(); },
                   "run 1 (b): missing field score"},
        BadRunCase{"MissingMode", [](v1::DensityRawRun* r) { r->clear_mode(); },
                   "run 1 (b): missing field mode"},
        BadRunCase{"MissingId", [](v1::DensityRawRun* r) { r->clear_id(); },
                   "run 1: missing field id"},
        BadRunCase{"NegativeThroughput",
                   [](v1::DensityRawRun* r) { r->set_throughput(-1); },
                   "run 1 (b): throughput must be >= 0, got -1"},
        BadRunCase{"NanAvailability",
                   [](v1::DensityRawRun* r) {
                     r->set_availability(
                         std::numeric_limits<double>::quiet_NaN());
                   },
                   "run 1 (b): availability must be a finite number, got "
                   "nan"},
        BadRunCase{"ZeroRam", [](v1::DensityRawRun* r) { r->set_ram_kib(0); },
                   "run 1 (b): ram_kib must be positive (shrink divides by "
                   "it)"},
        BadRunCase{"DuplicateId", [](v1::DensityRawRun* r) { r->set_id("a"); },
                   "run 1 (a): duplicate id, first at run 0"}),
    [](const ::testing::TestParamInfo<BadRunCase>& info) {
      return info.param.name;
    });

// A bad run is refused even when a filter would leave it out.
TEST(DensityRankTest, FiltersDoNotHideBadRuns) {
  v1::RankDensityRequest request = SmallRequest();
  request.mutable_runs(2)->set_ram_kib(0);
  request.set_mode("Tween");
  auto response = RankDensity(request);
  ASSERT_FALSE(response.ok());
  EXPECT_THAT(response.status().message(), HasSubstr("run 2 (trap)"));
}

// A run missing a field in JSON is refused the same way.
TEST(DensityRankTest, RunMissingAFieldInJsonIsRefused) {
  v1::RankDensityRequest request;
  ASSERT_TRUE(ParseJson(R"({"runs": [{"id": "r", "mode": "m", "dtype": "d",
      "arch": "a", "throughput": 1, "availability": 1, "avg_accuracy": 1,
      "soft_acc": 0, "score": 1}]})",
                        "request", false, &request)
                  .ok());
  auto response = RankDensity(request);
  ASSERT_FALSE(response.ok());
  EXPECT_EQ(response.status().message(), "run 0 (r): missing field ram_kib");
}

}  // namespace
}  // namespace headroom
