// The rankstat_http_* self-metrics come from the one counter list (daemon/src/http/counters.hpp): every
// row is served under its family and label with the value of its own field, in the list's order.

#include <catch2/catch.hpp>

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <string>
#include <vector>

#include "http/counters.hpp"
#include "retired_totals.hpp"
#include "segment_registry.hpp"
#include "self_metrics.hpp"
#include "testkit.hpp"
#include "text_exposition.hpp"

namespace {

// The exposition line a row should produce: `family 7` or `family{reason="idle"} 7`.
std::string expected_line(const rankstat::http::CounterInfo& row, std::size_t value) {
  std::string line(row.family);
  if (!row.label_name.empty()) {
    line += "{" + std::string(row.label_name) + "=\"" + std::string(row.label_value) + "\"}";
  }
  return line + " " + std::to_string(value) + "\n";
}

}  // namespace

TEST_CASE("every HTTP counter is served under the family and label its one row names, in the list's order") {
  rankstat::testkit::TempDir dir;
  rankstat::RetiredTotals retired("");
  rankstat::RegistryOptions options;
  options.directory = dir.path();
  rankstat::SegmentRegistry registry(options, retired);

  // A distinct value per row, so that a row reading another row's field shows.
  rankstat::HttpCounters counters;
  std::size_t value = 100;
  for (const rankstat::http::CounterInfo& row : rankstat::http::kCounterInfo) counters.*row.member = value++;

  rankstat::SelfMetrics self;
  const std::string text = rankstat::exposition::serialize(self.collect(registry, counters, 0));

  value = 100;
  std::size_t previous_position = 0;
  for (const rankstat::http::CounterInfo& row : rankstat::http::kCounterInfo) {
    const std::string line = expected_line(row, value++);
    INFO(line);
    const std::size_t position = text.find(line);
    REQUIRE(position != std::string::npos);
    CHECK(position > previous_position);
    previous_position = position;
    if (!row.help.empty()) {
      CHECK(text.find("# HELP " + std::string(row.family) + " " + std::string(row.help) + "\n") !=
            std::string::npos);
      const char* type = row.type == rankstat::http::CounterType::kGauge ? "gauge" : "counter";
      CHECK(text.find("# TYPE " + std::string(row.family) + " " + type + "\n") != std::string::npos);
    }
  }
}

TEST_CASE("the HTTP counter list gives each field one row and each family its help once") {
  using rankstat::http::kCounterInfo;
  std::vector<std::string> families;
  for (std::size_t i = 0; i < std::size(kCounterInfo); ++i) {
    for (std::size_t j = 0; j < i; ++j) CHECK(kCounterInfo[j].member != kCounterInfo[i].member);
    if (!kCounterInfo[i].help.empty()) families.emplace_back(kCounterInfo[i].family);
  }
  CHECK(families.size() ==
        10);  // rankstat_http_connections_evicted_total and _auth_failures_total hold two or three
  CHECK(sizeof(rankstat::http::Counters) == std::size(kCounterInfo) * sizeof(std::uint64_t));
}
