// The rank documents of the JSON API (rankview/rank_documents.hpp) for a live, a stalled and a dead rank,
// built from a real segment's header: their members, and that what they serialize to is JSON a strict
// parser accepts even when the rank's header strings are not UTF-8.
#include <array>
#include <boost/json.hpp>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <string>

#include "rankstat/rankview/rank_documents.hpp"
#include "rankstat/reporter.hpp"
#include "rankstat/shmproto/reader.hpp"
#include "small_segment.hpp"
#include "testkit.hpp"

using rankstat::testkit::TempDir;
namespace json = boost::json;
namespace rankview = rankstat::rankview;
namespace shm = rankstat::shm;

namespace {

constexpr std::uint64_t kSecond = 1'000'000'000ull;

// The header of a real segment, as a reader copies it at open.
shm::SegmentHeader real_header(const TempDir& dir) {
  rankstat::Reporter writer;
  auto options = rankstat::testkit::small_segment_options(dir, "docs", 2);
  options.identity.model_name = "llama";
  REQUIRE(writer.open(options) == rankstat::Status::kOk);
  shm::OpenedSegment opened = shm::open_segment(writer.path(), /*consumer=*/false);
  INFO(opened.message);
  REQUIRE(opened.reason == shm::RejectReason::kNone);
  return opened.identity;
}

// Serializes `value` and parses it back with Boost.JSON's strict parser (invalid UTF-8 is an error).
json::value round_trip(const json::value& value) {
  const std::string text = json::serialize(value);
  json::error_code ec;
  json::value parsed = json::parse(text, ec);
  INFO(text);
  REQUIRE_FALSE(ec);
  return parsed;
}

rankview::RankFacts facts_for(const shm::SegmentHeader& header, shm::RankState state) {
  rankview::RankFacts facts;
  facts.id = "docs.scheduler.dp2";
  facts.identity = &header;
  facts.state = state;
  facts.producer.records_written = 10;
  facts.producer.dropped_records = 1;
  facts.producer.heartbeat_ns = 100 * kSecond;
  facts.records_per_second = 2.5;
  facts.records_drained = 9;
  facts.ring_fill_ratio = 0.25;
  return facts;
}

}  // namespace

TEST_CASE("a live rank's summary names its identity, liveness and ring counters", "[rankview]") {
  TempDir dir;
  const shm::SegmentHeader header = real_header(dir);
  const auto facts = facts_for(header, shm::RankState::kLive);
  const json::object doc = round_trip(rankview::rank_summary(facts, 101 * kSecond)).as_object();
  CHECK(doc.at("id") == "docs.scheduler.dp2");
  CHECK(doc.at("instance") == "docs");
  CHECK(doc.at("role") == "scheduler");
  CHECK(doc.at("model_name") == "llama");
  CHECK(doc.at("state") == "LIVE");
  CHECK(doc.at("ranks").at("dp_rank") == 2);
  CHECK(doc.at("pid").to_number<std::uint32_t>() == header.pid);
  // A string: a JSON number would lose the low bits of a 64-bit nonce.
  CHECK(doc.at("generation").as_string() == std::to_string(header.generation));
  CHECK(doc.at("heartbeat_age_seconds").to_number<double>() == Approx(1.0));
  CHECK(doc.at("records_written") == 10);
  CHECK(doc.at("records_drained") == 9);
  CHECK(doc.at("dropped_records") == 1);
  CHECK(doc.at("ring_fill_ratio").to_number<double>() == 0.25);
  CHECK(doc.at("ring_quarantined") == false);
  CHECK_FALSE(doc.contains("warning"));
}

TEST_CASE(
    "a stalled rank's summary says STALLED with its heartbeat age, and an observer's shows nothing drained",
    "[rankview]") {
  TempDir dir;
  const shm::SegmentHeader header = real_header(dir);
  auto facts = facts_for(header, shm::RankState::kStalled);
  facts.records_drained.reset();  // rankstat --direct drains nothing
  const json::object doc = round_trip(rankview::rank_summary(facts, 160 * kSecond)).as_object();
  CHECK(doc.at("state") == "STALLED");
  CHECK(doc.at("heartbeat_age_seconds").to_number<double>() == Approx(60.0));
  CHECK(doc.at("records_drained").is_null());
  // A heartbeat newer than the reader's clock (garbage, or another clock) is no negative age.
  const json::object ahead = round_trip(rankview::rank_summary(facts, 50 * kSecond)).as_object();
  CHECK(ahead.at("heartbeat_age_seconds").to_number<double>() == 0.0);
}

TEST_CASE("a dead rank's summary says DEAD and an untrusted owner is warned about", "[rankview]") {
  TempDir dir;
  const shm::SegmentHeader header = real_header(dir);
  auto facts = facts_for(header, shm::RankState::kDead);
  facts.ring_quarantined = true;
  facts.untrusted_owner_uid = 4243;
  facts.untrusted_owner_name = "uid 4243";
  const json::object doc = round_trip(rankview::rank_summary(facts, 101 * kSecond)).as_object();
  CHECK(doc.at("state") == "DEAD");
  CHECK(doc.at("ring_quarantined") == true);
  CHECK(doc.at("untrusted_owner") == 4243);
  CHECK(doc.at("warning").as_string().find("uid 4243") != json::string::npos);
}

TEST_CASE("header strings that are not UTF-8 are replaced and the documents stay valid JSON", "[rankview]") {
  TempDir dir;
  shm::SegmentHeader header = real_header(dir);
  // A writer (or a forger) may leave any bytes in the header's strings.
  std::strcpy(header.model_name,
              "ll\xff\xfe"
              "ama");
  std::strcpy(header.engine_type, "\xc3");  // a truncated two-byte sequence
  const auto facts = facts_for(header, shm::RankState::kLive);
  const json::object doc = round_trip(rankview::rank_summary(facts, 101 * kSecond)).as_object();
  CHECK(doc.at("model_name") ==
        "ll\xEF\xBF\xBD\xEF\xBF\xBD"
        "ama");
  CHECK(doc.at("engine_type") == "\xEF\xBF\xBD");

  json::array ranks;
  ranks.push_back(doc);
  const std::map<std::string, std::uint64_t> rejected{{"bad_magic", 2}};
  const json::object all =
      round_trip(rankview::ranks_document("/dev/shm/\xff", std::move(ranks), rejected, false)).as_object();
  CHECK(all.at("shm_dir") == "/dev/shm/\xEF\xBF\xBD");
  CHECK(all.at("ranks").as_array().size() == 1);
  CHECK(all.at("rejected_segments").at("bad_magic") == 2);
  CHECK_FALSE(all.contains("details"));
  const json::object details = rankview::ranks_document("/dev/shm", {}, {}, true);
  CHECK(details.at("details") == true);
}

TEST_CASE("the scheduler document holds the present fields by section, NaN as null and priorities of None",
          "[rankview]") {
  CHECK(rankview::scheduler_document(nullptr, 0).is_null());

  shm::SchedulerSnapshot fixed{};
  fixed.report_kind = static_cast<std::uint32_t>(shm::ReportKind::kDecode);
  fixed.num_running_reqs = 7;
  fixed.gen_throughput = 321.5;
  fixed.fwd_occupancy = std::numeric_limits<double>::quiet_NaN();
  const std::array<shm::PriorityCount, 3> priorities{{
      {3, static_cast<std::uint8_t>(shm::QueueId::kWaiting), 0, 0, 4},
      {0, static_cast<std::uint8_t>(shm::QueueId::kRunning), shm::kPriorityIsNone, 0, 1},
      {0, 200, 0, 0, 9},  // an unknown queue: left out
  }};
  const rankview::SchedulerSample sample{&fixed, priorities, 17, 90 * kSecond};
  const json::object doc = round_trip(rankview::scheduler_document(&sample, 100 * kSecond)).as_object();
  CHECK(doc.at("report_kind") == "decode");
  CHECK(doc.at("sequence") == 17);
  CHECK(doc.at("age_seconds").to_number<double>() == Approx(10.0));
  const json::object& fields = doc.at("fields").as_object();
  bool found_running = false;
  bool found_occupancy = false;
  for (const auto& [section, members] : fields) {
    if (section == "priorities") continue;
    if (const auto* v = members.as_object().if_contains("num_running_reqs")) {
      found_running = true;
      CHECK(*v == 7);
    }
    if (const auto* v = members.as_object().if_contains("fwd_occupancy")) {
      found_occupancy = true;
      CHECK(v->is_null());
    }
  }
  CHECK(found_running);
  CHECK(found_occupancy);
  const json::array& listed = fields.at("priorities").as_array();
  REQUIRE(listed.size() == 2);
  CHECK(listed[0].at("priority") == 3);
  CHECK(listed[0].at("count") == 4);
  CHECK(listed[1].at("priority").is_null());
}

TEST_CASE("series documents show a gauge never set or a torn read as null and histogram buckets cumulatively",
          "[rankview]") {
  shm::SeriesInfo gauge;
  gauge.kind = shm::SeriesKind::kGauge;
  gauge.gauge_mode = shm::GaugeMode::kLiveSum;
  gauge.family = "engine:queue";
  gauge.labels = {{"model", "m"}};
  shm::SeriesValue unset;
  json::object doc = round_trip(rankview::series_document(gauge, unset)).as_object();
  CHECK(doc.at("type") == "gauge");
  CHECK(doc.at("mode") == "livesum");
  CHECK(doc.at("labels").at("model") == "m");
  CHECK(doc.at("value").is_null());
  shm::SeriesValue set;
  set.value = 4;
  set.set_ns = 1;
  CHECK(rankview::series_document(gauge, set).at("value") == 4.0);
  set.consistent = false;
  CHECK(rankview::series_document(gauge, set).at("value").is_null());

  shm::SeriesInfo counter;
  counter.kind = shm::SeriesKind::kCounter;
  counter.family = "engine:requests";
  shm::SeriesValue total;
  total.value = std::numeric_limits<double>::infinity();
  CHECK(round_trip(rankview::series_document(counter, total)).at("value").is_null());

  shm::SeriesInfo histogram;
  histogram.kind = shm::SeriesKind::kHistogram;
  histogram.family = "engine:latency_seconds";
  histogram.bounds = {0.1, 1.0};
  shm::SeriesValue counts;
  counts.counts = {1, 2, 3};
  counts.sum = 4.5;
  doc = round_trip(rankview::series_document(histogram, counts)).as_object();
  CHECK(doc.at("type") == "histogram");
  CHECK(doc.at("count") == 6);
  CHECK(doc.at("sum").to_number<double>() == 4.5);
  const json::array& buckets = doc.at("buckets").as_array();
  REQUIRE(buckets.size() == 3);
  CHECK(buckets[0].at("cumulative_count") == 1);
  CHECK(buckets[1].at("cumulative_count") == 3);
  CHECK(buckets[2].at("le") == "+Inf");
  CHECK(buckets[2].at("cumulative_count") == 6);

  histogram.kind = shm::SeriesKind::kSummary;
  histogram.bounds.clear();
  counts.counts = {6};
  doc = round_trip(rankview::series_document(histogram, counts)).as_object();
  CHECK(doc.at("type") == "summary");
  CHECK(doc.at("count") == 6);
  CHECK_FALSE(doc.contains("buckets"));
}
