// Test support shared by unit and integration tests. Everything here bounds its own time.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace rankstat::testkit {

// A private directory on tmpfs (/dev/shm when writable, else $TMPDIR), removed with its content on
// destruction, so tests never touch real segments and always clean up.
class TempDir {
 public:
  explicit TempDir(const std::string& prefix = "rankstat-test");
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::vector<std::string> list() const;  // file names, sorted

 private:
  std::string path_;
};

// A child process started with posix_spawn; killed (SIGKILL) and reaped on destruction if still running.
class ChildProcess {
 public:
  ChildProcess(const std::vector<std::string>& argv, const std::map<std::string, std::string>& extra_env = {},
               const std::string& stdout_path = "");
  ~ChildProcess();
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;
  pid_t pid() const { return pid_; }
  bool running();
  void signal(int signo);
  // Waits for exit; returns the exit status (or 128 + signal), nullopt on timeout.
  std::optional<int> wait_for(std::chrono::milliseconds timeout);

 private:
  pid_t pid_ = -1;
  std::optional<int> status_;
};

struct HttpResponse {
  int status = 0;
  std::map<std::string, std::string> headers;  // lower-case names
  std::string body;
};

// One HTTP/1.1 GET over loopback with "Connection: close"; nullopt on connect/read failure or timeout.
std::optional<HttpResponse> http_get(const std::string& host, int port, const std::string& target,
                                     const std::map<std::string, std::string>& headers = {},
                                     std::chrono::milliseconds timeout = std::chrono::seconds(5));

// Polls `condition` every 10 ms until it holds or `timeout` passes.
bool wait_until(const std::function<bool()>& condition, std::chrono::milliseconds timeout);

std::string read_file(const std::string& path);
std::string binary_path(const std::string& relative);  // under the build directory
std::string source_path(const std::string& relative);  // under the source directory

// Runs a shell command, capturing stdout+stderr; returns the exit status.
int run_command(const std::string& command, std::string* output = nullptr);

}  // namespace rankstat::testkit

namespace rankstat::testkit {

// rankstatd started on an ephemeral loopback port, reading `shm_dir`; killed on destruction.
class DaemonUnderTest {
 public:
  explicit DaemonUnderTest(const std::string& shm_dir, const std::vector<std::string>& extra_args = {});
  int port() const { return port_; }
  ChildProcess& process() { return *process_; }
  std::optional<HttpResponse> get(const std::string& target,
                                  const std::map<std::string, std::string>& headers = {});
  std::string log() const { return read_file(log_path_); }
  // SIGTERM, then waits for exit; returns the exit status.
  std::optional<int> stop();

 private:
  TempDir files_{"rankstatd-test-files"};
  std::string log_path_;
  std::string address_path_;
  std::unique_ptr<ChildProcess> process_;
  int port_ = 0;
};

// Series of `family` in a text exposition: each as {labels-as-text, value}.
struct Sample {
  std::string labels;  // the text between { and }, or empty
  double value = 0;
};
std::vector<Sample> samples_of(const std::string& exposition, const std::string& family);
// The single value of `family` whose label text contains every `fragment`; nullopt if none or several.
std::optional<double> value_of(const std::string& exposition, const std::string& family,
                               const std::vector<std::string>& fragments = {});

}  // namespace rankstat::testkit

namespace rankstat::testkit {

// A fake rank (fake_rank/fake_rank.hpp: the test writer, the fault writer) run as a child with
// RANKSTAT_SHM_DIR set and its stdout captured: the reading side of the lines it prints.
class RankProcess {
 public:
  // `binary` relative to the build tree (binary_path); `wrapper`: a command the rank runs under, e.g.
  // setpriv to run it as another user.
  RankProcess(const std::string& binary, const std::string& shm_dir, const std::vector<std::string>& args,
              const std::map<std::string, std::string>& extra_env = {},
              const std::vector<std::string>& wrapper = {});
  ChildProcess& process() { return *process_; }
  pid_t pid() const { return process_->pid(); }
  bool wait_for_output(const std::string& text, std::chrono::milliseconds timeout = std::chrono::seconds(10));
  // Waits until the rank printed "ready" (its values are published).
  bool wait_ready(std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
    return wait_for_output("ready", timeout);
  }
  std::string output() const { return read_file(out_path_); }
  // The "<key>=<n>" figure of the line printed at exit (appends, dropped, events, p99_ns, ...).
  std::optional<std::uint64_t> printed(const std::string& key) const;
  // SIGTERM (clean exit) and wait; returns the exit status.
  std::optional<int> stop();
  // SIGKILL (a crash) and wait.
  void kill();

 private:
  TempDir out_dir_{"rankstat-rank-out"};
  std::string out_path_;
  std::unique_ptr<ChildProcess> process_;
};

// tests/integration/rankstat_test_writer (tests/integration/test_writer.cpp).
class WriterProcess : public RankProcess {
 public:
  WriterProcess(const std::string& shm_dir, const std::vector<std::string>& args);
  // What the writer added to its test counter in all.
  std::optional<std::uint64_t> events() const { return printed("events"); }
};

}  // namespace rankstat::testkit
