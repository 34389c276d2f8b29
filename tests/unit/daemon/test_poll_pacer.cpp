#include <catch2/catch.hpp>

#include "poll_pacer.hpp"

using rankstat::PollPacer;
using namespace std::chrono_literals;

namespace {

constexpr std::uint64_t kMs = 1'000'000;

// Feeds timer passes spaced by the pacer's own interval, each finding `fill_per_second` * interval.
std::chrono::microseconds settle(PollPacer& pacer, std::uint64_t& now_ns, double fill_per_second,
                                 int passes) {
  for (int i = 0; i < passes; ++i) {
    const double seconds = std::chrono::duration<double>(pacer.interval()).count();
    now_ns += static_cast<std::uint64_t>(seconds * 1e9);
    pacer.observe(now_ns, fill_per_second * seconds, false, true);
  }
  return pacer.interval();
}

// A 2 ms .. 100 ms pacer that has seen empty rings long enough to sit at its slowest interval.
PollPacer idle_pacer(std::uint64_t& now_ns) {
  PollPacer pacer(2ms, 100ms);
  now_ns = kMs;
  pacer.observe(now_ns, 0, false, true);
  REQUIRE(settle(pacer, now_ns, 0, 10) == 100ms);
  return pacer;
}

}  // namespace

TEST_CASE("the pacer starts at its fastest interval and backs off to its slowest while rings stay empty") {
  PollPacer pacer(2ms, 100ms);
  CHECK(pacer.interval() == 2ms);
  std::uint64_t now = kMs;
  pacer.observe(now, 0, false, true);
  CHECK(pacer.interval() == 4ms);  // at most a doubling per timer pass
  CHECK(settle(pacer, now, 0, 10) == 100ms);
}

TEST_CASE("the pacer drains a steadily filling ring when about an eighth of it is used") {
  PollPacer pacer(2ms, 100ms);
  std::uint64_t now = kMs;
  pacer.observe(now, 0, false, true);
  // 1.25 rings per second: an eighth of the ring every 100 ms.
  CHECK(settle(pacer, now, 1.25, 20) == 100ms);
  // 5 rings per second: an eighth every 25 ms.
  const auto interval = settle(pacer, now, 5, 20);
  CHECK(interval.count() == Approx(25000).epsilon(0.01));
}

TEST_CASE("the pacer shortens at once when rings fill faster, but lengthens by at most 2x per pass") {
  std::uint64_t now = 0;
  PollPacer pacer = idle_pacer(now);
  now += 100 * kMs;
  pacer.observe(now, 0.25, false, true);  // a quarter of a ring in 100 ms: 50 ms would reach an eighth
  CHECK(pacer.interval().count() == Approx(50000).epsilon(0.01));
  now += 50 * kMs;
  pacer.observe(now, 0, false, true);
  CHECK(pacer.interval() == 100ms);
  now += 100 * kMs;
  pacer.observe(now, 0.001, false, true);
  CHECK(pacer.interval() == 100ms);
}

TEST_CASE("a dropped record or a half-full ring sends the pacer to its fastest interval") {
  std::uint64_t now = 0;
  PollPacer pacer = idle_pacer(now);
  now += 100 * kMs;
  pacer.observe(now, 0.01, true, true);
  CHECK(pacer.interval() == 2ms);
  REQUIRE(settle(pacer, now, 0, 10) == 100ms);
  now += 100 * kMs;
  pacer.observe(now, 0.6, false, true);
  CHECK(pacer.interval() == 2ms);
}

TEST_CASE(
    "scrapes that drain between timer passes count toward the fill rate but never lengthen the interval") {
  std::uint64_t now = 0;
  PollPacer pacer = idle_pacer(now);
  // A scrape 10 ms after the last pass finds 5 % of a ring: at that rate an eighth takes 25 ms.
  now += 10 * kMs;
  pacer.observe(now, 0.05, false, false);
  CHECK(pacer.interval().count() == Approx(25000).epsilon(0.01));
  // Back-to-back empty scrapes leave it alone.
  for (int i = 0; i < 5; ++i) {
    now += kMs;
    pacer.observe(now, 0, false, false);
  }
  CHECK(pacer.interval().count() == Approx(25000).epsilon(0.01));
}

TEST_CASE("a new writer resets the pacer to its fastest interval, and equal bounds give a fixed interval") {
  std::uint64_t now = 0;
  PollPacer pacer = idle_pacer(now);
  pacer.hurry();
  CHECK(pacer.interval() == 2ms);
  PollPacer fixed(50ms, 50ms);
  CHECK(settle(fixed, now, 0, 5) == 50ms);
  CHECK(settle(fixed, now, 100, 5) == 50ms);
  fixed.set_bounds(5ms, 20ms);
  CHECK(fixed.interval() == 20ms);
}
