// The multiprocess aggregation rules of FamilySet, one mode at a time, with contributors built by hand.
#include <catch2/catch.hpp>

#include "family_set.hpp"

using rankstat::Contributor;
using rankstat::FamilySet;
using rankstat::Labels;
using rankstat::shm::GaugeMode;

namespace {

Contributor rank(std::uint32_t pid, bool live, std::uint64_t created_ns = 1, std::string_view name = "seg") {
  Contributor c;
  c.pid = pid;
  c.live = live;
  c.created_ns = created_ns;
  c.segment_name = name;
  return c;
}

std::vector<prometheus::MetricFamily> gauges(GaugeMode mode, bool first_live, bool second_live, double a = 1,
                                             double b = 2) {
  FamilySet set;
  set.add_gauge("g", "help", mode, {}, a, 100, rank(123, first_live));
  set.add_gauge("g", "help", mode, {}, b, 200, rank(456, second_live));
  return set.finish();
}

double only_value(const std::vector<prometheus::MetricFamily>& families) {
  REQUIRE(families.size() == 1);
  REQUIRE(families[0].metric.size() == 1);
  return families[0].metric[0].gauge.value;
}

}  // namespace

TEST_CASE("all mode keeps one series per process, dead ones included, with a pid label") {
  auto f = gauges(GaugeMode::kAll, false, true);
  REQUIRE(f[0].metric.size() == 2);
  CHECK(f[0].metric[0].label.back().name == "pid");
  CHECK(f[0].metric[0].label.back().value == "123");
  CHECK(f[0].metric[0].gauge.value == 1);
  CHECK(f[0].metric[1].gauge.value == 2);
}

TEST_CASE("liveall mode drops a dead process's series") {
  auto f = gauges(GaugeMode::kLiveAll, false, true);
  REQUIRE(f[0].metric.size() == 1);
  CHECK(f[0].metric[0].label.back().value == "456");
}

TEST_CASE("sum keeps a dead process in the total, livesum does not") {
  CHECK(only_value(gauges(GaugeMode::kSum, false, true)) == 3);
  CHECK(only_value(gauges(GaugeMode::kLiveSum, false, true)) == 2);
}

TEST_CASE("min and max consider every process, the live forms only live ones") {
  CHECK(only_value(gauges(GaugeMode::kMin, true, true)) == 1);
  CHECK(only_value(gauges(GaugeMode::kLiveMin, false, true)) == 2);
  CHECK(only_value(gauges(GaugeMode::kMax, true, true, 2, 1)) == 2);
  CHECK(only_value(gauges(GaugeMode::kLiveMax, false, true, 2, 1)) == 1);
}

TEST_CASE("mostrecent takes the newest record even from a dead process, livemostrecent only from live ones") {
  FamilySet set;
  set.add_gauge("g", "h", GaugeMode::kMostRecent, {}, 5, 300, rank(1, false));
  set.add_gauge("g", "h", GaugeMode::kMostRecent, {}, 7, 200, rank(2, true));
  CHECK(only_value(set.finish()) == 5);
  set.add_gauge("g", "h", GaugeMode::kLiveMostRecent, {}, 5, 300, rank(1, false));
  set.add_gauge("g", "h", GaugeMode::kLiveMostRecent, {}, 7, 200, rank(2, true));
  CHECK(only_value(set.finish()) == 7);
}

TEST_CASE("mostrecent ties go to the newer generation, then to the smaller segment name, in any order") {
  for (int order = 0; order < 2; ++order) {
    FamilySet set;
    const Contributor older = rank(1, true, 10, "b");
    const Contributor newer = rank(2, true, 20, "c");
    if (order == 0) {
      set.add_gauge("g", "h", GaugeMode::kMostRecent, {}, 1, 100, older);
      set.add_gauge("g", "h", GaugeMode::kMostRecent, {}, 2, 100, newer);
    } else {
      set.add_gauge("g", "h", GaugeMode::kMostRecent, {}, 2, 100, newer);
      set.add_gauge("g", "h", GaugeMode::kMostRecent, {}, 1, 100, older);
    }
    CHECK(only_value(set.finish()) == 2);
  }
  for (int order = 0; order < 2; ++order) {
    FamilySet set;
    const Contributor a = rank(1, true, 10, "a");
    const Contributor b = rank(2, true, 10, "b");
    set.add_gauge("g", "h", GaugeMode::kMostRecent, {}, order == 0 ? 1 : 2, 100, order == 0 ? a : b);
    set.add_gauge("g", "h", GaugeMode::kMostRecent, {}, order == 0 ? 2 : 1, 100, order == 0 ? b : a);
    CHECK(only_value(set.finish()) == 1);
  }
}

TEST_CASE("counters are summed per label set over every contributor") {
  FamilySet set;
  set.add_counter("c_total", "h", {{"mode", "decode"}}, 3);
  set.add_counter("c_total", "h", {{"mode", "decode"}}, 4);
  set.add_counter("c_total", "h", {{"mode", "prefill"}}, 1);
  auto f = set.finish();
  REQUIRE(f.size() == 1);
  REQUIRE(f[0].metric.size() == 2);
  CHECK(f[0].metric[0].counter.value == 7);
  CHECK(f[0].metric[1].counter.value == 1);
}

TEST_CASE(
    "histograms are summed bucket by bucket and made cumulative with a +Inf bucket equal to the count") {
  FamilySet set;
  set.add_histogram("h", "h", {}, {1, 2}, {1, 2, 3}, 10);
  set.add_histogram("h", "h", {}, {1, 2}, {0, 1, 1}, 5);
  auto f = set.finish();
  REQUIRE(f.size() == 1);
  const auto& h = f[0].metric[0].histogram;
  REQUIRE(h.bucket.size() == 3);
  CHECK(h.bucket[0].cumulative_count == 1);
  CHECK(h.bucket[1].cumulative_count == 4);
  CHECK(h.bucket[2].cumulative_count == 8);
  CHECK(std::isinf(h.bucket[2].upper_bound));
  CHECK(h.sample_count == 8);
  CHECK(h.sample_sum == 15);
}

TEST_CASE("a family reported with another type, mode or buckets is counted as a conflict, not merged") {
  FamilySet set;
  set.add_gauge("x", "h", GaugeMode::kMostRecent, {}, 1, 1, rank(1, true));
  set.add_counter("x", "h", {}, 5);
  set.add_gauge("x", "h", GaugeMode::kSum, {}, 1, 1, rank(2, true));
  set.add_histogram("y", "h", {}, {1}, {1, 0}, 1);
  set.add_histogram("y", "h", {}, {2}, {1, 0}, 1);
  CHECK(set.conflicts() == 3);
  auto f = set.finish();
  REQUIRE(f.size() == 2);
  CHECK(f[0].type == prometheus::MetricType::Gauge);
  CHECK(f[1].metric[0].histogram.sample_count == 1);
}

TEST_CASE("identity labels follow SGLang's order, with priority and dp_rank only when they apply") {
  rankstat::shm::SegmentHeader h{};
  h.role = static_cast<std::uint32_t>(rankstat::shm::Role::kScheduler);
  std::strcpy(h.model_name, "m");
  std::strcpy(h.engine_type, "decode");
  h.tp_rank = 1;
  h.pp_rank = 0;
  h.moe_ep_rank = 1;
  h.dp_rank = rankstat::shm::kRankUnset;
  auto names = [](const Labels& l) {
    std::string s;
    for (const auto& x : l) s += x.name + "=" + x.value + ",";
    return s;
  };
  CHECK(names(rankstat::identity_labels(h)) ==
        "model_name=m,engine_type=decode,tp_rank=1,pp_rank=0,moe_ep_rank=1,");
  h.flags = rankstat::shm::kFlagPriorityScheduling;
  h.dp_rank = 2;
  const rankstat::shm::LabelPairs extra = {{"cluster", "a"}};
  REQUIRE(rankstat::shm::encode_label_pairs(extra, h.extra_labels, sizeof h.extra_labels));
  CHECK(names(rankstat::identity_labels(h)) ==
        "model_name=m,engine_type=decode,tp_rank=1,pp_rank=0,moe_ep_rank=1,priority=,dp_rank=2,cluster=a,");
}

TEST_CASE("only the stats-logging rank exports unless all-schedulers mode is on") {
  rankstat::shm::SegmentHeader h{};
  h.role = static_cast<std::uint32_t>(rankstat::shm::Role::kScheduler);
  h.attn_tp_rank = 1;
  CHECK_FALSE(rankstat::exports_engine_metrics(h));
  h.flags = rankstat::shm::kFlagAllSchedulersMetrics;
  CHECK(rankstat::exports_engine_metrics(h));
  h.flags = 0;
  h.attn_tp_rank = 0;
  CHECK(rankstat::exports_engine_metrics(h));
  h.role = static_cast<std::uint32_t>(rankstat::shm::Role::kTokenizer);
  h.attn_tp_rank = 3;
  CHECK(rankstat::exports_engine_metrics(h));
}

TEST_CASE("a counter total that only rounding lowers is not exported lower, a real drop is") {
  FamilySet set;
  std::string first;
  set.add_counter("c_total", "h", {}, 0.1 + 0.2);  // 0.30000000000000004
  set.render(first);
  std::string second;
  set.add_counter("c_total", "h", {}, 0.3);  // the same total summed in another order
  set.render(second);
  CHECK(second == first);
  std::string third;
  set.add_counter("c_total", "h", {}, 0.1);
  set.render(third);
  CHECK(third.find("c_total 0.1\n") != std::string::npos);
}

TEST_CASE("samples whose labels cannot be written correctly are dropped and counted, the others kept") {
  FamilySet set;
  std::uint64_t expected = 0;
  const auto dropped = [&](const char* what) {
    INFO(what);
    CHECK(set.unexposable() == ++expected);
  };
  const Labels good = {{"model_name", "m"}, {"engine_type", "unified"}};
  set.add_counter("c_total", "h", good, 1);
  set.add_counter("c_total", "h", {{"model_name", "m\xff"}}, 1);
  dropped("invalid UTF-8 value");
  set.add_counter("c_total", "h", {{"model_name", "m"}, {"model_name", "n"}}, 1);
  dropped("a name twice");
  set.add_counter("c_total", "h", {{"__name__", "x"}}, 1);
  dropped("a reserved name");
  set.add_histogram("h", "h", {{"le", "0.5"}}, {1}, {1, 0}, 1);
  dropped("le on a histogram");
  set.add_histogram("s", "h", {{"quantile", "0.5"}}, {}, {1}, 1, {}, nullptr, 0, true);
  dropped("quantile on a summary");
  set.add_gauge("g", "h", GaugeMode::kAll, {{"pid", "1"}}, 1, 1, rank(7, true));
  dropped("pid where the all mode adds one");
  set.add_histogram("h", "h", good, {1}, {1, 0}, 1);
  set.add_gauge("g", "h", GaugeMode::kAll, good, 1, 1, rank(7, true));
  CHECK(set.unexposable() == expected);
  const auto families = set.finish();
  REQUIRE(families.size() == 3);  // c_total, g and h; no family made of dropped samples only
  for (const auto& family : families) {
    INFO(family.name);
    CHECK(family.metric.size() == 1);
  }
}

TEST_CASE(
    "constant labels join every series in name order, per-process gauges and declared series included") {
  FamilySet set;
  set.set_constant_labels({{"node", "gpu-a"}, {"cluster", "eu1"}});
  set.add_gauge("g", "h", GaugeMode::kAll, {{"tp_rank", "0"}}, 1, 100, rank(7, true));
  set.add_counter("c", "h", {}, 2, rank(7, true));  // a declared series with no labels of its own
  const auto families = set.finish();
  REQUIRE(families.size() == 2);
  const Labels expected_counter = {{"cluster", "eu1"}, {"node", "gpu-a"}};
  const auto& counter = families[0].metric.at(0).label;
  REQUIRE(counter.size() == expected_counter.size());
  for (std::size_t i = 0; i < counter.size(); ++i) {
    CHECK(counter[i].name == expected_counter[i].name);
    CHECK(counter[i].value == expected_counter[i].value);
  }
  std::vector<std::string> gauge_names;
  for (const auto& l : families[1].metric.at(0).label) gauge_names.push_back(l.name);
  CHECK(gauge_names == std::vector<std::string>{"cluster", "node", "pid", "tp_rank"});
  CHECK(set.shadowed_constant_labels() == 0);
}

TEST_CASE(
    "an engine label named like a constant label keeps the engine's value, and each such series is counted") {
  FamilySet set;
  set.set_constant_labels({{"node", "gpu-a"}});
  std::string text;
  for (int round = 0; round < 3; ++round) {  // through the slots too: counted in every round
    FamilySet::SegmentSlots& slots = set.slots("seg", 1, "");
    slots.cumulative.resize(2);
    set.add_counter("c", "h", {{"node", "engine-side"}}, 1, rank(7, true), &slots.cumulative[0]);
    set.add_counter("d", "h", {}, 1, rank(7, true), &slots.cumulative[1]);
    CHECK(set.shadowed_constant_labels() == 1);
    text.clear();
    set.render(text);
    CHECK(set.shadowed_constant_labels() == 0);  // a new round starts
  }
  INFO(text);
  CHECK(text.find("\nc{node=\"engine-side\"} 1.0\n") != std::string::npos);
  CHECK(text.find("\nd{node=\"gpu-a\"} 1.0\n") != std::string::npos);
}

TEST_CASE("a constant label may not take an engine, reserved or scrape-time label name") {
  using rankstat::constant_label_refusal;
  for (const char* fine : {"cluster", "deployment", "node", "node_rank", "pd_role", "namespace", "pod"}) {
    INFO(fine);
    CHECK(constant_label_refusal(fine, "instance_id").empty());
  }
  for (const char* engine : {"model_name", "engine_type", "tp_rank", "pp_rank", "moe_ep_rank", "dp_rank",
                             "priority", "instance_id"}) {
    INFO(engine);
    CHECK(constant_label_refusal(engine, "instance_id").find("collides") != std::string::npos);
  }
  for (const char* reserved : {"le", "quantile", "pid", "gt", "__name__", "__x"}) {
    INFO(reserved);
    CHECK(constant_label_refusal(reserved, "").find("reserved") != std::string::npos);
  }
  CHECK(constant_label_refusal("job", "").find("set by Prometheus at scrape time") != std::string::npos);
  CHECK(constant_label_refusal("instance", "").find("--label.instance") != std::string::npos);
  CHECK(constant_label_refusal("no-dash", "").find("not a valid") != std::string::npos);
}
