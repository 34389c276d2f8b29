// The process_* families from /proc/self: parsing of a stat line and the live values of this process.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>

#include "process_metrics.hpp"

TEST_CASE(
    "a /proc/<pid>/stat line gives CPU seconds, start time and memory, even with ') ' in the command name") {
  // Fields after the name: state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime(14)
  // stime(15) cutime cstime priority nice threads itrealvalue starttime(22) vsize(23) rss(24) ...
  const std::string stat =
      "4242 (rank) stat (x)) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 3 0 1000 104857600 2560 "
      "18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 0 0 0 0 0 0";
  const auto s = rankstat::parse_proc_stat(stat, 1'700'000'000, 100, 4096);
  REQUIRE(s);
  CHECK(s->cpu_seconds == Approx(3.0));  // (250 + 50) ticks at 100 Hz
  CHECK(s->start_time_seconds == Approx(1'700'000'010.0));
  CHECK(s->virtual_bytes == 104857600);
  CHECK(s->resident_bytes == 2560.0 * 4096);
  CHECK_FALSE(rankstat::parse_proc_stat("4242 (truncated) S 1 2 3", 0, 100, 4096));
  CHECK_FALSE(rankstat::parse_proc_stat("no parenthesis at all", 0, 100, 4096));
}

TEST_CASE(
    "this process's stats are plausible: started in the past, memory resident, descriptors within the "
    "limit") {
  const auto s = rankstat::read_process_stats();
  REQUIRE(s);
  const double now =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  CHECK(s->start_time_seconds <= now + 1);
  CHECK(s->start_time_seconds > now - 3600);  // a unit test process is minutes old at most
  CHECK(s->resident_bytes > 0);
  CHECK(s->virtual_bytes >= s->resident_bytes);
  CHECK(s->open_fds >= 3);  // stdin, stdout, stderr
  CHECK(s->open_fds <= s->max_fds);
  CHECK(s->cpu_seconds >= 0);
  const auto families = rankstat::process_families(*s);
  REQUIRE(families.size() == 6);
  CHECK(families[0].name == "process_cpu_seconds_total");
  CHECK(families[0].type == prometheus::MetricType::Counter);
}
