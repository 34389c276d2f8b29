// The cached exposition writes exactly what prometheus-cpp writes:
//   * exposition::serialize == prometheus::TextSerializer over every metric type, label escaping, special
//     and random values, timestamps, histograms with and without a final +Inf bound, summaries;
//   * FamilySet::render (persistent series, slots, pre-rendered heads) == TextSerializer(finish()) of a
//     fresh set, round after round, for hand-made contributions and for real segments through
//     collect_engine_metrics while series, priorities, groups and liveness change;
//   * ChunkedGzip produces one valid gzip member equal to the body, and reuses unchanged chunks.
#include <prometheus/text_serializer.h>

#include <bit>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <random>

#include "engine_collect.hpp"
#include "http/chunked_gzip.hpp"
#include "http/gzip.hpp"
#include "rankstat/reporter.hpp"
#include "segment_registry.hpp"
#include "testkit.hpp"
#include "text_exposition.hpp"

using namespace rankstat;
using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;

namespace {

std::string reference(const std::vector<MetricFamily>& families) {
  return prometheus::TextSerializer().Serialize(families);
}

ClientMetric with_labels(std::vector<ClientMetric::Label> labels) {
  ClientMetric m;
  m.label = std::move(labels);
  return m;
}

std::vector<double> special_values() {
  const double inf = std::numeric_limits<double>::infinity();
  return {0.0,
          -0.0,
          1.0,
          -1.0,
          0.1,
          1.0 / 3,
          2.0 / 3,
          100,
          1e15 - 1,
          1e15,
          1e15 + 1,
          9007199254740993.0,
          1e16,
          1e17,
          1e21,
          123456789012345678.0,
          1e-4,
          1.5e-5,
          1e-5,
          0.30000000000000004,
          std::numeric_limits<double>::min(),
          std::numeric_limits<double>::denorm_min(),
          std::numeric_limits<double>::max(),
          std::numeric_limits<double>::lowest(),
          std::numeric_limits<double>::epsilon(),
          inf,
          -inf,
          std::numeric_limits<double>::quiet_NaN(),
          -std::numeric_limits<double>::quiet_NaN(),
          4.94e-322,
          -2.5,
          0.0026244,
          1191.06};
}

}  // namespace

TEST_CASE("serialize equals prometheus-cpp for every metric type, escaping and special value") {
  std::vector<MetricFamily> families;
  MetricFamily gauge{
      "sglang:gauge", "Help with \"quotes\" and a backslash \\ kept as is.", MetricType::Gauge, {}};
  for (const double v : special_values()) {
    ClientMetric m =
        with_labels({{"model_name", "a\"b\\c\nd"}, {"empty", ""}, {"utf8", "\xc3\xa9t\xc3\xa9"}});
    m.gauge.value = v;
    gauge.metric.push_back(m);
  }
  ClientMetric timestamped;
  timestamped.gauge.value = 3;
  timestamped.timestamp_ms = 1700000000123;
  gauge.metric.push_back(timestamped);
  ClientMetric negative_timestamp = with_labels({{"x", "\\\\\"\"\n\n"}});
  negative_timestamp.timestamp_ms = -7;
  gauge.metric.push_back(negative_timestamp);
  families.push_back(gauge);

  MetricFamily counter{"c_total", "", MetricType::Counter, {}};
  for (const double v : special_values()) {
    ClientMetric m = with_labels({{"mode", "decode"}});
    m.counter.value = v;
    counter.metric.push_back(m);
  }
  families.push_back(counter);

  MetricFamily untyped{"u", "untyped help", MetricType::Untyped, {}};
  ClientMetric u;
  u.untyped.value = 0.25;
  untyped.metric.push_back(u);
  families.push_back(untyped);

  MetricFamily summary{"s", "summary", MetricType::Summary, {}};
  ClientMetric sm = with_labels({{"a", "1"}});
  sm.summary.sample_count = std::numeric_limits<std::uint64_t>::max();
  sm.summary.sample_sum = 1e-7;
  sm.summary.quantile = {{0.5, 1}, {0.99, std::nan("")}, {1, -std::numeric_limits<double>::infinity()}};
  summary.metric.push_back(sm);
  ClientMetric bare_summary;
  summary.metric.push_back(bare_summary);
  families.push_back(summary);

  MetricFamily histogram{"h_seconds", "histogram", MetricType::Histogram, {}};
  ClientMetric with_inf = with_labels({{"stage", "prefill"}});
  with_inf.histogram.sample_count = 9;
  with_inf.histogram.sample_sum = 12.5;
  with_inf.histogram.bucket = {{1, 0.001}, {4, 0.0026244}, {9, std::numeric_limits<double>::infinity()}};
  histogram.metric.push_back(with_inf);
  ClientMetric without_inf;  // prometheus-cpp adds the +Inf bucket itself
  without_inf.histogram.sample_count = 2;
  without_inf.histogram.sample_sum = 0;
  without_inf.histogram.bucket = {{1, 1e-5}, {2, 1e21}};
  histogram.metric.push_back(without_inf);
  ClientMetric no_buckets = with_labels({{"le_like", "x"}});
  no_buckets.histogram.sample_count = 0;
  histogram.metric.push_back(no_buckets);
  families.push_back(histogram);

  MetricFamily empty{"empty_family", "no samples", MetricType::Gauge, {}};
  families.push_back(empty);

  CHECK(exposition::serialize(families) == reference(families));
  CHECK(exposition::serialize({}) == reference({}));
}

TEST_CASE("values format exactly as prometheus-cpp's for random doubles of every magnitude") {
  std::mt19937_64 random(42);
  MetricFamily family{"g", "", MetricType::Gauge, {}};
  for (int i = 0; i < 20000; ++i) {
    ClientMetric m;
    double v = 0;
    switch (i % 4) {
      case 0: {  // any bit pattern: every exponent, NaNs, infinities, denormals
        const std::uint64_t bits = random();
        std::memcpy(&v, &bits, sizeof v);
        break;
      }
      case 1:  // small decimals as engines report them
        v = std::round(std::uniform_real_distribution<double>(-1e4, 1e4)(random) * 1000) / 1000;
        break;
      case 2:  // integers around the integer fast path's limits
        v = static_cast<double>(static_cast<std::int64_t>(random() % 40'000'000'000'000'000ull)) -
            2e16 * static_cast<double>(i % 3);
        break;
      default:
        v = std::ldexp(std::uniform_real_distribution<double>(0.5, 1)(random),
                       static_cast<int>(random() % 200) - 100);
        break;
    }
    m.gauge.value = v;
    family.metric.push_back(m);
  }
  const std::vector<MetricFamily> families{family};
  CHECK(exposition::serialize(families) == reference(families));
}

namespace {

Contributor contributor(std::uint32_t pid, bool live, std::uint64_t created_ns, std::string_view name,
                        std::string_view instance = "") {
  Contributor c;
  c.pid = pid;
  c.live = live;
  c.created_ns = created_ns;
  c.segment_name = name;
  c.instance = instance;
  return c;
}

// One round of varied contributions, driven by `random`; `slots` (may be null) as collect_engine_metrics
// uses them.
void contribute_round(FamilySet& set, std::mt19937& random, FamilySet::SegmentSlots* slots) {
  static const shm::GaugeMode kModes[] = {shm::GaugeMode::kAll,        shm::GaugeMode::kLiveAll,
                                          shm::GaugeMode::kSum,        shm::GaugeMode::kLiveSum,
                                          shm::GaugeMode::kMin,        shm::GaugeMode::kLiveMin,
                                          shm::GaugeMode::kMax,        shm::GaugeMode::kLiveMax,
                                          shm::GaugeMode::kMostRecent, shm::GaugeMode::kLiveMostRecent};
  std::uniform_int_distribution<int> coin(0, 3);
  std::uniform_real_distribution<double> value(-100, 100);
  auto slot = [&](std::size_t i) -> FamilySet::Slot* {
    if (slots == nullptr) return nullptr;
    if (slots->cumulative.size() <= i) slots->cumulative.resize(i + 1);
    return &slots->cumulative[i];
  };
  // Every contribution point has its own slot, whether or not it contributes in a round.
  if (slots != nullptr) slots->cumulative.resize(4 * 32);
  for (int segment = 0; segment < 4; ++segment) {
    std::size_t next_slot = static_cast<std::size_t>(segment) * 32;
    const std::string name = "seg" + std::to_string(segment);
    const bool live = segment != 3 || coin(random) != 0;
    const Contributor from =
        contributor(100 + static_cast<std::uint32_t>(segment), live, static_cast<std::uint64_t>(segment),
                    name, segment == 2 ? "other" : "main");
    const Labels base{{"model_name", "m\"x"}, {"tp_rank", std::to_string(segment % 2)}};
    for (std::size_t m = 0; m < std::size(kModes); ++m) {
      FamilySet::Slot* gauge_slot = slot(next_slot++);
      if (coin(random) == 0) continue;  // this contribution is absent in this round
      set.add_gauge("g_" + std::to_string(m), "gauge help", kModes[m], base, std::round(value(random)),
                    static_cast<std::uint64_t>(coin(random)), from, gauge_slot);
    }
    // A family whose mode differs between contributors in some rounds: a conflict.
    set.add_gauge("mixed", "mixed", coin(random) == 0 ? shm::GaugeMode::kSum : shm::GaugeMode::kMax, {}, 1, 1,
                  from, slot(next_slot++));
    set.add_counter("c_total", "counter", base, std::round(value(random)), from, slot(next_slot++));
    FamilySet::Slot* other_counter = slot(next_slot++);
    if (coin(random) != 0) set.add_counter("c_total", "counter", {{"mode", "x"}}, 1.5, from, other_counter);
    const std::vector<double> bounds =
        coin(random) == 0 ? std::vector<double>{1, 2} : std::vector<double>{0.5, 1, 5};
    std::vector<std::uint64_t> counts(bounds.size() + 1);
    for (auto& c : counts) c = static_cast<std::uint64_t>(coin(random));
    set.add_histogram("h_seconds", "histogram", base, bounds, counts, value(random), from, slot(next_slot++));
    // Summaries travel as histograms without bounds (this family is one in the catalog).
    set.add_histogram("sglang:eplb_balancedness", "balancedness", base, {},
                      {static_cast<std::uint64_t>(segment)}, 0.5, from, slot(next_slot++));
    // A bad histogram (counts not matching bounds) still takes part in the type check.
    set.add_histogram("h_bad", "bad", base, {1}, {1}, 1, from, slot(next_slot++));
    FamilySet::Slot* bad_counter = slot(next_slot++);
    if (coin(random) == 0) set.add_counter("h_bad", "bad", base, 1, from, bad_counter);
  }
}

}  // namespace

TEST_CASE(
    "FamilySet::render equals the plain serializer of finish(), in prometheus_client's spelling, round after "
    "round") {
  for (const bool use_slots : {false, true}) {
    std::mt19937 persistent_random(7);
    std::mt19937 fresh_random(7);
    FamilySet persistent;
    for (int round = 0; round < 60; ++round) {
      FamilySet::SegmentSlots* slots = use_slots ? &persistent.slots("all", 1, "") : nullptr;
      contribute_round(persistent, persistent_random, slots);
      FamilySet fresh;
      contribute_round(fresh, fresh_random, nullptr);
      CHECK(persistent.conflicts() == fresh.conflicts());
      CHECK(persistent.collisions() == fresh.collisions());
      std::string text;
      std::vector<std::size_t> ends;
      persistent.render(text, &ends);
      const std::string expected =
          exposition::serialize(fresh.finish(), exposition::Dialect::kPrometheusClient);
      REQUIRE(text == expected);
      // Family boundaries: increasing, each starting with a HELP or TYPE line, the last at the end.
      std::size_t begin = 0;
      for (const std::size_t end : ends) {
        REQUIRE(end > begin);
        CHECK(text.compare(begin, 2, "# ") == 0);
        begin = end;
      }
      CHECK(begin == text.size());
    }
  }
}

namespace {

struct Rank {
  Reporter reporter;
  std::uint32_t counter = 0;
  std::uint32_t histogram = 0;
  std::uint32_t gauge_all = 0;
  std::uint32_t gauge_sum = 0;
  std::uint32_t timeouts = 0;
};

void open_rank(Rank& rank, const std::string& dir, int dp_rank, bool priorities) {
  ReporterOptions options;
  options.shm_dir = dir;
  options.identity.instance = "render";
  options.identity.model_name = "Qwen/Qwen3-8B";
  options.identity.dp_rank = dp_rank;
  options.identity.flags = priorities ? shm::kFlagPriorityScheduling : 0;
  options.identity.extra_labels = {{"cluster", "eu \"west\"\\1"}};
  options.geometry.ring_bytes = 64 * 1024;
  REQUIRE(rank.reporter.open(options) == Status::kOk);
  REQUIRE(rank.reporter.register_counter("sglang:realtime_tokens_total", {{"mode", "decode"}},
                                         rank.counter) == Status::kOk);
  const double bounds[] = {0.1, 0.5, 1};
  REQUIRE(rank.reporter.register_histogram("sglang:queue_time_seconds", {}, bounds, rank.histogram) ==
          Status::kOk);
  REQUIRE(rank.reporter.register_gauge("sglang:test_all", shm::GaugeMode::kAll, {}, rank.gauge_all) ==
          Status::kOk);
  REQUIRE(rank.reporter.register_gauge("sglang:test_sum", shm::GaugeMode::kSum, {}, rank.gauge_sum) ==
          Status::kOk);
  // Exported without identity labels: every rank adds into the same series.
  // Declared with its own labels only, as the Python metric classes declare every series.
  const shm::LabelPairs stage = {{"stage", "bootstrap"}};
  rankstat::Reporter::SeriesSpec spec;
  spec.kind = shm::SeriesKind::kCounter;
  spec.flags = shm::kSeriesWithoutIdentityLabels;
  spec.family = "sglang:kv_transfer_timeouts_total";
  spec.help = "KV transfer timeouts by stage.";
  spec.labels = &stage;
  REQUIRE(rank.reporter.register_series(spec, rank.timeouts) == Status::kOk);
}

void report(Rank& rank, int round, int dp_rank) {
  shm::SchedulerSnapshot s{};
  s.report_kind =
      static_cast<std::uint32_t>(round % 3 == 0 ? shm::ReportKind::kPrefill : shm::ReportKind::kDecode);
  s.groups = (round % 2 == 0 ? shm::kGroupSpeculative : 0) | (round % 4 == 1 ? shm::kGroupRoutingKeys : 0);
  s.num_running_reqs = round + dp_rank;
  s.token_usage = 0.01 * round;
  s.gen_throughput = 1000.0 / (round + 1);
  s.fwd_occupancy = round == 5 ? std::nan("") : 50;
  s.routing_key_running_req_counts[3] = static_cast<std::uint64_t>(round);
  // Priorities appear over the rounds (the seen set grows, shifting slot positions).
  std::vector<shm::PriorityCount> priorities;
  for (int p = 0; p <= round % 5; ++p) priorities.push_back({(p * 7) % 5, 0, 0, 0, p + round});
  if (round % 6 == 4) priorities.push_back({0, 1, shm::kPriorityIsNone, 0, 3});
  REQUIRE(rank.reporter.report_scheduler(s, priorities) == Status::kOk);
  REQUIRE(rank.reporter.counter_add(rank.counter, round) == Status::kOk);
  REQUIRE(rank.reporter.histogram_observe(rank.histogram, 0.1 * round) == Status::kOk);
  if (round >= 2) REQUIRE(rank.reporter.gauge_set(rank.gauge_all, round) == Status::kOk);
  REQUIRE(rank.reporter.gauge_set(rank.gauge_sum, 1) == Status::kOk);
  REQUIRE(rank.reporter.counter_add(rank.timeouts, 1) == Status::kOk);
}

}  // namespace

TEST_CASE(
    "FamilySet::render over real segments equals the plain serializer while ranks, series and states "
    "change") {
  testkit::TempDir dir;
  std::vector<std::unique_ptr<Rank>> ranks;
  RetiredTotals retired("");
  RegistryOptions options;
  options.directory = dir.path();
  SegmentRegistry registry(options, retired);
  FamilySet persistent;
  for (int round = 0; round < 12; ++round) {
    if (round == 0 || round == 3 || round == 7) {
      auto rank = std::make_unique<Rank>();
      open_rank(*rank, dir.path(), static_cast<int>(ranks.size()), ranks.size() != 1);
      ranks.push_back(std::move(rank));
    }
    if (round == 9) {
      std::uint32_t late = 0;  // a series registered late
      REQUIRE(ranks[0]->reporter.register_counter("sglang:num_requests_total", {{"is_streaming", "true"}},
                                                  late) == Status::kOk);
      REQUIRE(ranks[0]->reporter.counter_add(late, 2) == Status::kOk);
    }
    for (std::size_t i = 0; i < ranks.size(); ++i) {
      if (ranks[i]->reporter.is_open()) report(*ranks[i], round, static_cast<int>(i));
    }
    if (round == 10) ranks[1]->reporter.close();  // clean exit: CLOSED, out of the live* gauges
    const std::uint64_t now = shm::monotonic_ns();
    registry.scan(now);
    registry.drain_all(now);
    registry.check_liveness(now, std::chrono::seconds(30));
    registry.refresh_cumulative();
    // The instance label changes the labels of every series (as a configuration reload can).
    const std::string instance_label = round >= 8 && round % 2 == 1 ? "engine" : "";
    for (int pass = 0; pass < 2; ++pass) {
      CollectOptions collect;
      collect.now_ns = now;
      collect.instance_label = instance_label;
      collect.dead_grace_ns = 1'000'000'000'000ull;
      FamilySet fresh;
      collect_engine_metrics(registry.generations(), collect, fresh);
      const std::string expected =
          exposition::serialize(fresh.finish(), exposition::Dialect::kPrometheusClient);
      collect_engine_metrics(registry.generations(), collect, persistent);
      std::string text;
      persistent.render(text);
      INFO("round " << round << ", pass " << pass << ", instance label '" << instance_label << "'");
      REQUIRE(text == expected);
      CHECK(text.find("sglang:num_running_reqs") != std::string::npos);
      // The rounds cover what the slots must follow: optional groups, sticky priorities, per-pid series.
      if (round % 4 == 1) CHECK(text.find("sglang:routing_key_running_req_count{") != std::string::npos);
      if (round >= 4) CHECK(text.find("priority=\"None\"") != std::string::npos);
      if (round >= 2) CHECK(text.find("sglang:test_all{") != std::string::npos);
      CHECK(text.find("sglang:kv_transfer_timeouts_total{stage=\"bootstrap\"} ") != std::string::npos);
    }
  }
}

namespace {

// Splits `body` at every family start ("# HELP" / "# TYPE" following a sample line).
std::vector<std::size_t> family_ends(const std::string& body) {
  std::vector<std::size_t> ends;
  std::size_t pos = 0;
  bool in_samples = false;
  while (pos < body.size()) {
    const std::size_t eol = body.find('\n', pos);
    const std::size_t next = eol == std::string::npos ? body.size() : eol + 1;
    const bool comment = body[pos] == '#';
    if (comment && in_samples) ends.push_back(pos);
    in_samples = !comment;
    pos = next;
  }
  ends.push_back(body.size());
  return ends;
}

std::string fake_body(int families, int ranks, int version) {
  std::string body;
  for (int f = 0; f < families; ++f) {
    body += "# HELP fam" + std::to_string(f) + " help\n# TYPE fam" + std::to_string(f) + " gauge\n";
    for (int r = 0; r < ranks; ++r) {
      body += "fam" + std::to_string(f) + "{model_name=\"m\",tp_rank=\"" + std::to_string(r) + "\"} " +
              std::to_string(f % 3 == 0 ? version : 1) + "\n";
    }
  }
  return body;
}

}  // namespace

TEST_CASE(
    "engine values are spelled as prometheus_client's floatToGoString spells them, checked against it") {
  // The real peer: Debian's python3-prometheus-client formats the same doubles.
  std::mt19937_64 random(11);
  std::vector<double> values = {0.0,
                                -0.0,
                                1.0,
                                -1.0,
                                0.1,
                                0.5,
                                1e-05,
                                0.0001,
                                123456.0,
                                1234567.0,
                                1e6,
                                1.1e6,
                                1.2e12,
                                1e15,
                                1e16,
                                1.5e16,
                                1e22,
                                -1e22,
                                5e-324,
                                1.7976931348623157e308,
                                2.5,
                                100.0,
                                65536.0,
                                41230.0,
                                0.375,
                                1834.5,
                                3.0000000000000004,
                                std::numeric_limits<double>::infinity(),
                                -std::numeric_limits<double>::infinity()};
  for (int i = 0; i < 3000; ++i) {
    const int exponent = static_cast<int>(random() % 50) - 25;
    const double mantissa = static_cast<double>(random() % 100000000) / 1e4;
    values.push_back(std::ldexp(1.0, 0) * mantissa * std::pow(10.0, exponent) * (random() % 5 == 0 ? -1 : 1));
    values.push_back(static_cast<double>(random() % 5000000));
    values.push_back(std::bit_cast<double>(random() & 0x7FEFFFFFFFFFFFFFull));
  }
  testkit::TempDir dir;
  const std::string input = dir.path() + "/values.txt";
  {
    std::ofstream out(input);
    out.precision(17);
    for (const double v : values) out << std::hexfloat << v << '\n';
  }
  const std::string output = dir.path() + "/formatted.txt";
  const std::string command =
      "/usr/bin/python3 -c \"import sys; from prometheus_client.utils import floatToGoString as f; "
      "print('\\n'.join(f(float.fromhex(l)) for l in open(sys.argv[1]).read().split()))\" " +
      input + " > " + output + " 2>/dev/null";
  if (std::system(command.c_str()) != 0) {
    WARN("python3 with prometheus_client is not available; skipping the comparison with the real peer");
    return;
  }
  std::ifstream in(output);
  std::string expected;
  std::size_t checked = 0;
  for (const double v : values) {
    REQUIRE(std::getline(in, expected));
    std::string actual;
    exposition::append_client_value(actual, v);
    INFO(std::hexfloat << v);
    CHECK(actual == expected);
    ++checked;
  }
  CHECK(checked == values.size());
}

TEST_CASE(
    "prometheus_client's spelling escapes HELP, sorts le among the labels and orders histogram samples as "
    "its multiprocess collector") {
  MetricFamily h;
  h.name = "lat_seconds";
  h.help = "Back\\slash\nnewline \"quoted\"";
  h.type = prometheus::MetricType::Histogram;
  ClientMetric m = with_labels({{"model_name", "m"}, {"engine_type", "unified"}});
  m.histogram.sample_count = 2;
  m.histogram.sample_sum = 1.5;
  m.histogram.bucket = {{1, 0.5}, {2, 1.0}};
  h.metric.push_back(m);
  CHECK(exposition::serialize({h}, exposition::Dialect::kPrometheusClient) ==
        "# HELP lat_seconds Back\\\\slash\\nnewline \"quoted\"\n"
        "# TYPE lat_seconds histogram\n"
        // prometheus_client's multiprocess collector: the family's sums first, then per label set its
        // buckets and its count.
        "lat_seconds_sum{engine_type=\"unified\",model_name=\"m\"} 1.5\n"
        "lat_seconds_bucket{engine_type=\"unified\",le=\"0.5\",model_name=\"m\"} 1.0\n"
        "lat_seconds_bucket{engine_type=\"unified\",le=\"1.0\",model_name=\"m\"} 2.0\n"
        "lat_seconds_bucket{engine_type=\"unified\",le=\"+Inf\",model_name=\"m\"} 2.0\n"
        "lat_seconds_count{engine_type=\"unified\",model_name=\"m\"} 2.0\n");
}

TEST_CASE("ChunkedGzip writes one gzip member of the body and re-deflates only changed chunks") {
  http::ChunkedGzip gzip(1);
  // Families of about 80 KiB: each is a chunk of its own (smaller neighbours are merged).
  const std::string first = fake_body(30, 2000, 1);
  auto a = gzip.compress(first, family_ends(first));
  CHECK(http::gzip_decompress(*a) == first);  // also checks CRC-32, ISIZE and that nothing trails
  CHECK(a->size() < first.size() / 5);
  CHECK(gzip.chunks_compressed() > 0);

  auto same = gzip.compress(first, family_ends(first));
  CHECK(same == a);  // unchanged body: the very same bytes, nothing deflated
  CHECK(gzip.chunks_compressed() == 0);

  const std::string second = fake_body(30, 2000, 2);  // every third family changes
  auto b = gzip.compress(second, family_ends(second));
  CHECK(http::gzip_decompress(*b) == second);

  CHECK(gzip.chunks_compressed() == 10);
  CHECK(gzip.chunks_reused() == 20);

  const std::string fewer = fake_body(7, 3, 2);  // families disappear; small ones make a single chunk
  CHECK(http::gzip_decompress(*gzip.compress(fewer, family_ends(fewer))) == fewer);
  CHECK(gzip.chunks_compressed() + gzip.chunks_reused() == 1);

  const std::string empty;
  CHECK(http::gzip_decompress(*gzip.compress(empty, {0})).empty());
  CHECK(http::gzip_decompress(*gzip.compress(empty, {})).empty());

  gzip.set_level(6);
  CHECK(http::gzip_decompress(*gzip.compress(second, family_ends(second))) == second);
  CHECK(gzip.chunks_reused() == 0);  // a new level starts over

  const std::vector<std::size_t> with_empty_chunks{0, 10, 10, second.size()};
  CHECK(http::gzip_decompress(*gzip.compress(second, with_empty_chunks)) == second);
  CHECK_THROWS(gzip.compress(second, {10, 5, second.size()}));
  CHECK_THROWS(gzip.compress(second, {10}));
}
