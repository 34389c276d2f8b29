// Helpers for the fault-injection tests (tests/integration/faults): a private tmpfs mount, the fault
// writer process, a background scraper that checks counters never go backwards, raw HTTP exchanges.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "testkit.hpp"

namespace rankstat::faults {

// A tmpfs of `size` (mount(8) syntax, e.g. "1m") mounted on a fresh directory for this object's
// lifetime; always unmounted on destruction, also when the test fails. mounted() is false (and
// error() says why) where mounting is not permitted; the caller then skips with a WARN.
class TmpfsMount {
 public:
  explicit TmpfsMount(const std::string& size);
  ~TmpfsMount();
  TmpfsMount(const TmpfsMount&) = delete;
  TmpfsMount& operator=(const TmpfsMount&) = delete;
  bool mounted() const { return mounted_; }
  const std::string& path() const { return path_; }
  const std::string& error() const { return error_; }

 private:
  testkit::TempDir parent_{"rankstat-tmpfs"};
  std::string path_;
  bool mounted_ = false;
  std::string error_;
};

// tests/integration/faults/rankstat_fault_writer (fault_writer.cpp) with RANKSTAT_SHM_DIR set, its output
// captured.
class FaultWriter : public testkit::RankProcess {
 public:
  // `wrapper`: a command the writer runs under, e.g. setpriv to run it as another user.
  FaultWriter(const std::string& shm_dir, const std::vector<std::string>& args,
              const std::map<std::string, std::string>& extra_env = {},
              const std::vector<std::string>& wrapper = {})
      : RankProcess("tests/integration/faults/rankstat_fault_writer", shm_dir, args, extra_env, wrapper) {}
  // A number from the exit summary line, e.g. field("p99_ns").
  std::optional<std::uint64_t> field(const std::string& name) const { return printed(name); }
};

// rankstatd on an ephemeral loopback port, started under `wrapper` (prlimit to lower its descriptor
// limit, setpriv to run it as another user); killed on destruction. Unlike testkit::DaemonUnderTest it
// may also be expected to fail at start: started() then stays false and exit_status() says how.
class WrappedDaemon {
 public:
  WrappedDaemon(const std::vector<std::string>& wrapper, const std::string& shm_dir,
                const std::vector<std::string>& extra_args,
                std::chrono::milliseconds start_timeout = std::chrono::seconds(20));
  bool started() const { return port_ > 0; }
  int port() const { return port_; }
  testkit::ChildProcess& process() { return *process_; }
  std::string log() const { return testkit::read_file(log_path_); }
  std::optional<testkit::HttpResponse> get(const std::string& target);
  // The body of a 200 /metrics response, or empty.
  std::string scrape();

 private:
  testkit::TempDir files_{"rankstatd-wrapped"};
  std::string log_path_;
  std::string address_path_;
  std::unique_ptr<testkit::ChildProcess> process_;
  int port_ = 0;
};

// A uid and gid no one on a test machine uses, standing for another local user (the attacker).
inline constexpr unsigned kAttackerUid = 4243;
// True when the tests may act as another user (root and setpriv); else the caller skips with a WARN.
bool can_switch_user();
// `setpriv` arguments running a command as `uid` (gid the same) without supplementary groups.
std::vector<std::string> as_user(unsigned uid);

// Remembers the largest value seen for every sample of the counter and histogram families whose name
// starts with one of `prefixes`, and reports any sample that went below it.
//
// Known issue (reported, owned by the aggregation code): a fractional total (a histogram's _sum, a
// seconds counter) is a floating-point sum over generations; when a dead generation is folded into the
// retired totals the additions happen in another order and the result can differ in its last bits, a
// decrease of an ulp or two. Those are counted apart as rounding_decreases() (and reported by the tests);
// anything larger is a violation.
class MonotonicWatch {
 public:
  explicit MonotonicWatch(std::vector<std::string> prefixes) : prefixes_(std::move(prefixes)) {}
  // Returns one description per decrease found in this exposition.
  std::vector<std::string> observe(const std::string& exposition);
  std::size_t series() const { return highest_.size(); }
  std::uint64_t samples_checked() const { return samples_checked_; }
  std::uint64_t rounding_decreases() const { return rounding_decreases_; }

 private:
  std::vector<std::string> prefixes_;
  std::map<std::string, double> highest_;
  std::uint64_t samples_checked_ = 0;
  std::uint64_t rounding_decreases_ = 0;
};

// Scrapes http://127.0.0.1:<port>/metrics in a loop on its own thread, feeding a MonotonicWatch. The
// port may change (a restarted daemon) or be unreachable for a while; failed scrapes are only counted.
class BackgroundScraper {
 public:
  explicit BackgroundScraper(std::vector<std::string> prefixes,
                             std::chrono::milliseconds interval = std::chrono::milliseconds(20));
  ~BackgroundScraper();
  void set_port(int port) { port_.store(port); }
  std::vector<std::string> violations() const;
  std::uint64_t scrapes_ok() const { return ok_.load(); }
  std::uint64_t scrapes_failed() const { return failed_.load(); }
  std::uint64_t samples_checked() const;
  std::uint64_t rounding_decreases() const;
  std::string last_body() const;

 private:
  void run(std::chrono::milliseconds interval);
  mutable std::mutex mutex_;
  MonotonicWatch watch_;
  std::vector<std::string> violations_;
  std::string last_body_;
  std::atomic<int> port_{0};
  std::atomic<bool> stop_{false};
  std::atomic<std::uint64_t> ok_{0};
  std::atomic<std::uint64_t> failed_{0};
  std::thread thread_;
};

// Sends `request` over a fresh loopback connection and returns whatever comes back until the server
// closes the connection or `timeout` passes; nullopt if it cannot connect.
std::optional<std::string> raw_exchange(int port, const std::string& request,
                                        std::chrono::milliseconds timeout = std::chrono::seconds(5));
// A connected, non-blocking loopback socket (for slow clients); -1 on failure.
int connect_loopback(int port);
// True once the peer closed `fd` (recv returns 0 or a reset) within `timeout`.
bool closed_by_peer(int fd, std::chrono::milliseconds timeout);

// Resident set size of a process in KiB, from /proc/<pid>/status.
std::optional<std::uint64_t> rss_kib(pid_t pid);

// Counts lines of `text` that contain `needle`.
std::size_t count_lines(const std::string& text, const std::string& needle);

// Writes bytes at `offset` of the file at `path`.
bool poke(const std::string& path, std::uint64_t offset, const void* bytes, std::size_t size);
template <typename T>
bool poke_value(const std::string& path, std::uint64_t offset, T value) {
  return poke(path, offset, &value, sizeof value);
}

// Appends one "[fault-counts] <name>=<value>" line to stdout (collected for docs/reliability.md).
void report_count(const std::string& name, std::uint64_t value);

}  // namespace rankstat::faults
