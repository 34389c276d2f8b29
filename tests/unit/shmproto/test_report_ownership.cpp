// SGLang's report-kind rule, which the daemon applies over every snapshot and rankstat --direct over
// the snapshots it samples (shm::ReportOwnership).
#include <catch2/catch.hpp>

#include "rankstat/shmproto/scheduler_snapshot.hpp"

namespace shm = rankstat::shm;

namespace {

constexpr std::uint64_t kSecond = 1'000'000'000ull;

shm::SchedulerSnapshot report(shm::ReportKind kind, double cache_hit_rate, double gen_throughput) {
  shm::SchedulerSnapshot s{};
  s.report_kind = static_cast<std::uint32_t>(kind);
  s.cache_hit_rate = cache_hit_rate;
  s.gen_throughput = gen_throughput;
  return s;
}

}  // namespace

TEST_CASE(
    "a decode report shows the cache hit rate of the last prefill report, and a prefill report the last "
    "decode throughput") {
  shm::ReportOwnership owner;
  auto prefill = report(shm::ReportKind::kPrefill, 0.75, 999);
  owner.apply(prefill, 1 * kSecond);
  auto decode = report(shm::ReportKind::kDecode, 0.10, 420);
  owner.apply(decode, 2 * kSecond);
  CHECK(decode.cache_hit_rate == 0.75);
  CHECK(decode.gen_throughput == 420);
  auto next_prefill = report(shm::ReportKind::kPrefill, 0.5, 7);
  owner.apply(next_prefill, 3 * kSecond);
  CHECK(next_prefill.cache_hit_rate == 0.5);
  CHECK(next_prefill.gen_throughput == 420);
}

TEST_CASE("until an owner report is seen, a report's own values are shown as given") {
  shm::ReportOwnership owner;
  auto decode = report(shm::ReportKind::kDecode, 0.3, 100);
  owner.apply(decode, kSecond);
  CHECK(decode.cache_hit_rate == 0.3);
  shm::ReportOwnership other;
  auto prefill = report(shm::ReportKind::kPrefill, 0.6, 55);
  other.apply(prefill, kSecond);
  CHECK(prefill.gen_throughput == 55);
}

TEST_CASE("an idle refresh drops the throughput to 0 and keeps the cache hit rate") {
  shm::ReportOwnership owner;
  auto prefill = report(shm::ReportKind::kPrefill, 0.8, 0);
  owner.apply(prefill, kSecond);
  auto decode = report(shm::ReportKind::kDecode, 0, 300);
  owner.apply(decode, 2 * kSecond);
  auto idle = report(shm::ReportKind::kIdle, 0, 300);
  owner.apply(idle, 40 * kSecond);
  CHECK(idle.gen_throughput == 0);
  CHECK(idle.cache_hit_rate == 0.8);
  auto later_prefill = report(shm::ReportKind::kPrefill, 0.9, 300);
  owner.apply(later_prefill, 41 * kSecond);
  CHECK(later_prefill.gen_throughput == 0);
}

TEST_CASE("the throughput falls to 0 once the last decode report is 30 s old") {
  shm::ReportOwnership owner;
  auto decode = report(shm::ReportKind::kDecode, 0, 250);
  owner.apply(decode, 100 * kSecond);
  owner.apply_staleness(decode, 129 * kSecond, shm::kGenThroughputStaleNs);
  CHECK(decode.gen_throughput == 250);
  owner.apply_staleness(decode, 131 * kSecond, shm::kGenThroughputStaleNs);
  CHECK(decode.gen_throughput == 0);
  auto prefill = report(shm::ReportKind::kPrefill, 0.4, 250);
  owner.apply(prefill, 132 * kSecond);
  CHECK(prefill.gen_throughput == 0);
}

TEST_CASE("an unspecified report owns every value it carries") {
  shm::ReportOwnership owner;
  auto plain = report(shm::ReportKind::kUnspecified, 0.2, 80);
  owner.apply(plain, kSecond);
  CHECK(plain.cache_hit_rate == 0.2);
  CHECK(plain.gen_throughput == 80);
  auto prefill = report(shm::ReportKind::kPrefill, 0.5, 0);
  owner.apply(prefill, 2 * kSecond);
  CHECK(prefill.gen_throughput == 80);
  auto decode = report(shm::ReportKind::kDecode, 0, 90);
  owner.apply(decode, 3 * kSecond);
  CHECK(decode.cache_hit_rate == 0.5);
}
