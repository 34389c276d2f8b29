#include "testkit.hpp"

#include "http_client.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>

extern char** environ;

namespace rankstat::testkit {

TempDir::TempDir(const std::string& prefix) {
  std::string base = "/dev/shm";
  if (access(base.c_str(), W_OK) != 0) {
    const char* tmp = std::getenv("TMPDIR");
    base = tmp != nullptr ? tmp : "/tmp";
  }
  std::string pattern = base + "/" + prefix + "-XXXXXX";
  std::vector<char> buffer(pattern.begin(), pattern.end());
  buffer.push_back('\0');
  if (mkdtemp(buffer.data()) == nullptr) throw std::runtime_error("mkdtemp failed: " + pattern);
  path_ = buffer.data();
}

TempDir::~TempDir() {
  std::error_code ignored;
  std::filesystem::remove_all(path_, ignored);
}

std::vector<std::string> TempDir::list() const {
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(path_))
    names.push_back(entry.path().filename());
  std::sort(names.begin(), names.end());
  return names;
}

ChildProcess::ChildProcess(const std::vector<std::string>& argv,
                           const std::map<std::string, std::string>& extra_env,
                           const std::string& stdout_path) {
  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string entry(*e);
    const auto eq = entry.find('=');
    if (eq != std::string::npos && extra_env.count(entry.substr(0, eq)) != 0) continue;
    env_strings.push_back(std::move(entry));
  }
  for (const auto& [key, value] : extra_env) env_strings.push_back(key + "=" + value);
  std::vector<char*> envp;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> args = argv;
  std::vector<char*> argp;
  for (auto& s : args) argp.push_back(s.data());
  argp.push_back(nullptr);

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  if (!stdout_path.empty()) {
    posix_spawn_file_actions_addopen(&actions, 1, stdout_path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    posix_spawn_file_actions_adddup2(&actions, 1, 2);
  }
  const int rc = posix_spawn(&pid_, argp[0], &actions, nullptr, argp.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) throw std::runtime_error("posix_spawn " + argv.at(0) + ": " + std::strerror(rc));
}

ChildProcess::~ChildProcess() {
  if (pid_ > 0 && !status_) {
    ::kill(pid_, SIGKILL);
    wait_for(std::chrono::seconds(10));
  }
}

bool ChildProcess::running() {
  if (status_) return false;
  int status = 0;
  const pid_t r = waitpid(pid_, &status, WNOHANG);
  if (r == pid_) {
    status_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    return false;
  }
  return true;
}

void ChildProcess::signal(int signo) {
  if (running()) ::kill(pid_, signo);
}

std::optional<int> ChildProcess::wait_for(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (running()) {
    if (std::chrono::steady_clock::now() >= deadline) return std::nullopt;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return status_;
}

// The CLI's client (cli/src/http_client.cpp), so the tests scrape the way rankstat does. Tests that must
// send malformed, partial or slow requests keep raw sockets (tests/unit/http/http_test_client.*,
// tests/integration/faults/fault_support.*): no client library will write those bytes.
std::optional<HttpResponse> http_get(const std::string& host, int port, const std::string& target,
                                     const std::map<std::string, std::string>& headers,
                                     std::chrono::milliseconds timeout) {
  const cli::Endpoint endpoint{host, std::to_string(port), false};
  const cli::HttpReply reply =
      cli::http_get(endpoint, target, timeout, {}, cli::HttpHeaders(headers.begin(), headers.end()));
  if (reply.failure != cli::HttpFailure::kNone) return std::nullopt;
  return HttpResponse{reply.status, reply.headers, reply.body};
}

bool wait_until(const std::function<bool()>& condition, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!condition()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

std::string binary_path(const std::string& relative) {
  return std::string(RANKSTAT_BINARY_DIR) + "/" + relative;
}
std::string source_path(const std::string& relative) {
  return std::string(RANKSTAT_SOURCE_DIR) + "/" + relative;
}

int run_command(const std::string& command, std::string* output) {
  std::FILE* pipe = ::popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return -1;
  char buffer[4096];
  std::string text;
  std::size_t n = 0;
  while ((n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0) text.append(buffer, n);
  const int status = ::pclose(pipe);
  if (output != nullptr) *output = std::move(text);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

}  // namespace rankstat::testkit

namespace rankstat::testkit {

DaemonUnderTest::DaemonUnderTest(const std::string& shm_dir, const std::vector<std::string>& extra_args) {
  log_path_ = files_.path() + "/rankstatd.log";
  address_path_ = files_.path() + "/address";
  std::vector<std::string> argv = {binary_path("daemon/rankstatd"), "--web.listen-address=127.0.0.1:0",
                                   "--shm.dir=" + shm_dir, "--web.address-file=" + address_path_,
                                   "--log.level=debug"};
  argv.insert(argv.end(), extra_args.begin(), extra_args.end());
  process_ = std::make_unique<ChildProcess>(argv, std::map<std::string, std::string>{}, log_path_);
  const bool up = wait_until(
      [&] {
        const std::string address = read_file(address_path_);
        const auto colon = address.rfind(':');
        if (colon == std::string::npos) return false;
        port_ = std::atoi(address.c_str() + colon + 1);
        return port_ > 0;
      },
      std::chrono::seconds(20));
  if (!up) throw std::runtime_error("rankstatd did not start; log:\n" + read_file(log_path_));
}

std::optional<HttpResponse> DaemonUnderTest::get(const std::string& target,
                                                 const std::map<std::string, std::string>& headers) {
  return http_get("127.0.0.1", port_, target, headers);
}

std::optional<int> DaemonUnderTest::stop() {
  process_->signal(SIGTERM);
  return process_->wait_for(std::chrono::seconds(10));
}

std::vector<Sample> samples_of(const std::string& exposition, const std::string& family) {
  std::vector<Sample> out;
  std::istringstream lines(exposition);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.empty() || line[0] == '#') continue;
    if (line.compare(0, family.size(), family) != 0) continue;
    const char next = line.size() > family.size() ? line[family.size()] : '\0';
    if (next != '{' && next != ' ') continue;
    Sample s;
    std::size_t value_at = family.size();
    if (next == '{') {
      const auto close = line.rfind('}');
      if (close == std::string::npos) continue;
      s.labels = line.substr(family.size() + 1, close - family.size() - 1);
      value_at = close + 1;
    }
    s.value = std::strtod(line.c_str() + value_at, nullptr);
    out.push_back(std::move(s));
  }
  return out;
}

std::optional<double> value_of(const std::string& exposition, const std::string& family,
                               const std::vector<std::string>& fragments) {
  std::optional<double> found;
  for (const Sample& s : samples_of(exposition, family)) {
    const bool all = std::all_of(fragments.begin(), fragments.end(),
                                 [&](const std::string& f) { return s.labels.find(f) != std::string::npos; });
    if (!all) continue;
    if (found) return std::nullopt;
    found = s.value;
  }
  return found;
}

}  // namespace rankstat::testkit

namespace rankstat::testkit {

RankProcess::RankProcess(const std::string& binary, const std::string& shm_dir,
                         const std::vector<std::string>& args,
                         const std::map<std::string, std::string>& extra_env,
                         const std::vector<std::string>& wrapper) {
  out_path_ = out_dir_.path() + "/rank.out";
  std::vector<std::string> argv = wrapper;
  argv.push_back(binary_path(binary));
  argv.insert(argv.end(), args.begin(), args.end());
  std::map<std::string, std::string> env = extra_env;
  env["RANKSTAT_SHM_DIR"] = shm_dir;
  process_ = std::make_unique<ChildProcess>(argv, env, out_path_);
}

bool RankProcess::wait_for_output(const std::string& text, std::chrono::milliseconds timeout) {
  return wait_until([&] { return output().find(text) != std::string::npos; }, timeout);
}

std::optional<std::uint64_t> RankProcess::printed(const std::string& key) const {
  const std::string text = output();
  const std::string field = key + "=";
  // The last occurrence that starts a word ("appends=" must not match "max_appends=").
  for (auto at = text.rfind(field); at != std::string::npos;
       at = at == 0 ? std::string::npos : text.rfind(field, at - 1)) {
    if (at == 0 || std::isspace(static_cast<unsigned char>(text[at - 1])) != 0) {
      return std::strtoull(text.c_str() + at + field.size(), nullptr, 10);
    }
  }
  return std::nullopt;
}

WriterProcess::WriterProcess(const std::string& shm_dir, const std::vector<std::string>& args)
    : RankProcess("tests/integration/rankstat_test_writer", shm_dir, args) {}

std::optional<int> RankProcess::stop() {
  process_->signal(SIGTERM);
  return process_->wait_for(std::chrono::seconds(10));
}

void RankProcess::kill() {
  process_->signal(SIGKILL);
  process_->wait_for(std::chrono::seconds(10));
}

}  // namespace rankstat::testkit
