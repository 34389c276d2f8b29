// A full shm directory (a 1 MiB tmpfs mounted for the test): creating a segment fails with a clear
// error instead of a SIGBUS later, the engine runs on without metrics and gets them when it retries.
#include <fcntl.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <thread>

#include "fault_support.hpp"
#include "rankstat/rankstat.h"
#include "rankstat/reporter.hpp"
#include "testkit.hpp"

using namespace rankstat::testkit;
using namespace rankstat::faults;
using namespace std::chrono_literals;

namespace {

// Writes zeros to `path` until the file system is full; returns the bytes written.
std::size_t fill(const std::string& path) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  REQUIRE(fd >= 0);
  std::vector<char> chunk(4096, '\0');
  std::size_t written = 0;
  for (;;) {
    const ssize_t n = ::write(fd, chunk.data(), chunk.size());
    if (n <= 0) break;
    written += static_cast<std::size_t>(n);
  }
  const int error = errno;
  ::close(fd);
  CHECK(error == ENOSPC);
  return written;
}

std::string scrape(DaemonUnderTest& daemon) {
  auto r = daemon.get("/metrics");
  REQUIRE(r);
  REQUIRE(r->status == 200);
  return r->body;
}

}  // namespace

TEST_CASE(
    "a full shm directory fails segment creation with a clear error and the engine runs on and retries") {
  TmpfsMount tmpfs("1m");
  if (!tmpfs.mounted()) {
    WARN("skipped: cannot mount a private tmpfs here (" << tmpfs.error() << ")");
    return;
  }
  REQUIRE(fill(tmpfs.path() + "/filler") > 512 * 1024);

  // The C++ and C APIs say what happened; nothing is left behind in the directory.
  rankstat::ReporterOptions options;
  options.shm_dir = tmpfs.path();
  options.identity.instance = "full";
  options.geometry.ring_bytes = 64 * 1024;
  rankstat::Reporter reporter;
  CHECK(reporter.open(options) == rankstat::Status::kNoSpace);
  CHECK(reporter.error_message().find("No space left on device") != std::string::npos);
  CHECK_FALSE(reporter.is_open());
  CHECK(reporter.report_scheduler(rankstat::shm::SchedulerSnapshot{}) == rankstat::Status::kClosed);
  ::setenv("RANKSTAT_SHM_DIR", tmpfs.path().c_str(), 1);
  rankstat_identity identity;
  rankstat_identity_init(&identity);
  identity.instance = "full";
  rankstat_reporter* handle = nullptr;
  const int code = rankstat_open(&identity, nullptr, &handle);
  const std::string message = rankstat_last_error();
  ::unsetenv("RANKSTAT_SHM_DIR");
  CHECK(code == RANKSTAT_ERR_NO_SPACE);
  CHECK(handle == nullptr);
  CHECK(message.find("cannot reserve") != std::string::npos);
  CHECK(rankstat_heartbeat(handle) == RANKSTAT_ERR_CLOSED);
  auto listing = [&] {
    std::vector<std::string> names;
    for (const auto& entry : std::filesystem::directory_iterator(tmpfs.path()))
      names.push_back(entry.path().filename());
    return names;
  };
  CHECK(listing() == std::vector<std::string>{"filler"});

  // An engine process: it reports the failure once, runs on, and retries every 100 ms.
  DaemonUnderTest daemon(tmpfs.path(), {"--shm.scan-interval=100ms", "--liveness.interval=50ms"});
  FaultWriter writer(tmpfs.path(), {"--instance=full", "--mode=paced", "--pace-us=500", "--seconds=60",
                                    "--retry-open-ms=100"});
  REQUIRE(writer.wait_for_output("open failed status=no_space"));
  CHECK(writer.output().find("No space left on device") != std::string::npos);
  std::this_thread::sleep_for(500ms);
  CHECK(writer.process().running());
  CHECK(listing() == std::vector<std::string>{"filler"});
  CHECK_FALSE(value_of(scrape(daemon), "sglang:test_events_total").has_value());

  // Space comes back: the next retry creates the segment and the daemon picks it up.
  REQUIRE(::unlink((tmpfs.path() + "/filler").c_str()) == 0);
  REQUIRE(writer.wait_for_output("ready after"));
  REQUIRE(
      wait_until([&] { return value_of(scrape(daemon), "sglang:test_events_total").value_or(0) > 0; }, 10s));

  // Fill the tmpfs to the last byte again: every page of the segment was reserved when it was created,
  // so the writer goes on appending through many laps of its ring without a SIGBUS.
  fill(tmpfs.path() + "/filler2");
  std::this_thread::sleep_for(1500ms);
  CHECK(writer.process().running());
  REQUIRE(writer.stop() == 0);
  const auto events = writer.field("events");
  REQUIRE(events);
  CHECK(*events > 1000);  // well over a 64 KiB ring's worth of records
  REQUIRE(wait_until(
      [&] {
        return value_of(scrape(daemon), "sglang:test_events_total") == Approx(static_cast<double>(*events));
      },
      10s));
  CHECK(writer.field("open_attempts").value_or(0) >= 2);
  CHECK(daemon.process().running());
  report_count("shm_full_open_attempts", writer.field("open_attempts").value_or(0));
}
