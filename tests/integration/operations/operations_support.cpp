#include "operations_support.hpp"

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <boost/json/parse.hpp>
#include <catch2/catch.hpp>
#include <cstring>
#include <stdexcept>
#include <thread>

extern char** environ;

namespace rankstat::ops_test {

using namespace std::chrono_literals;

std::string cli_path() {
  return testkit::binary_path("cli/rankstat");
}

CliResult run_cli(const std::vector<std::string>& args, const std::map<std::string, std::string>& env,
                  std::chrono::milliseconds timeout) {
  testkit::TempDir files("rankstat-cli-run");
  const std::string out_path = files.path() + "/out";
  const std::string err_path = files.path() + "/err";
  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry(*e);
    const std::string name = entry.substr(0, entry.find('='));
    if (name == "RANKSTAT_ADDRESS" || name == "RANKSTAT_SHM_DIR" || name == "NO_COLOR" ||
        env.count(name) != 0) {
      continue;
    }
    env_strings.push_back(entry);
  }
  for (const auto& [k, v] : env) env_strings.push_back(k + "=" + v);
  std::vector<char*> envp;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> argv = {cli_path()};
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<char*> argp;
  for (auto& s : argv) argp.push_back(s.data());
  argp.push_back(nullptr);

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 1, out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&actions, 2, err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, argp[0], &actions, nullptr, argp.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) throw std::runtime_error(std::string("posix_spawn rankstat: ") + std::strerror(rc));
  CliResult result;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  int status = 0;
  for (;;) {
    const pid_t done = waitpid(pid, &status, WNOHANG);
    if (done == pid) {
      result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      break;
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      ::kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      result.exit_code = -1;
      break;
    }
    std::this_thread::sleep_for(5ms);
  }
  result.out = testkit::read_file(out_path);
  result.err = testkit::read_file(err_path);
  return result;
}

std::string address_flag(const testkit::DaemonUnderTest& daemon) {
  return "--address=127.0.0.1:" + std::to_string(daemon.port());
}

std::unique_ptr<testkit::ChildProcess> start_writer(const testkit::TempDir& shm,
                                                    const std::vector<std::string>& args) {
  std::vector<std::string> argv = {testkit::binary_path("tests/integration/rankstat_test_writer")};
  argv.insert(argv.end(), args.begin(), args.end());
  return std::make_unique<testkit::ChildProcess>(
      argv, std::map<std::string, std::string>{{"RANKSTAT_SHM_DIR", shm.path()}}, "/dev/null");
}

boost::json::object parse_object(const std::string& text) {
  boost::system::error_code ec;
  boost::json::value v = boost::json::parse(text, ec);
  INFO("JSON text: " << text);
  REQUIRE_FALSE(ec);
  REQUIRE(v.is_object());
  return std::move(v.as_object());
}

const boost::json::object& object_at(const boost::json::object& o, const std::string& key) {
  INFO("key " << key);
  const auto* at = o.if_contains(key);
  REQUIRE(at != nullptr);
  REQUIRE(at->is_object());
  return at->as_object();
}

const boost::json::object& rank_by_id(const boost::json::object& doc, const std::string& id) {
  const auto* ranks = doc.if_contains("ranks");
  REQUIRE(ranks != nullptr);
  REQUIRE(ranks->is_array());
  for (const auto& r : ranks->as_array()) {
    const auto* rank_id = r.is_object() ? r.as_object().if_contains("id") : nullptr;
    if (rank_id != nullptr && rank_id->is_string() && rank_id->as_string() == id) {
      return r.as_object();
    }
  }
  FAIL("no rank " << id);
  throw std::logic_error("unreachable");
}

double number(const boost::json::value& v) {
  if (v.is_double()) return v.get_double();
  if (v.is_int64()) return static_cast<double>(v.get_int64());
  if (v.is_uint64()) return static_cast<double>(v.get_uint64());
  FAIL("not a number: " << boost::json::value(v));
  return 0;
}

std::string text(const boost::json::value& v) {
  return v.is_string() ? std::string(v.as_string()) : std::string();
}

namespace {
std::string quote(const std::string& text) {
  std::string out = "'";
  for (char c : text) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  return out + "'";
}
}  // namespace

Tmux::Tmux() {
  static std::atomic<int> sequence{0};
  socket_ = "rankstat-test-" + std::to_string(::getpid()) + "-" + std::to_string(sequence++);
}

Tmux::~Tmux() {
  testkit::run_command("tmux -L " + socket_ + " kill-server");
}

void Tmux::start(const std::string& command, int columns, int rows) {
  std::string output;
  const int rc =
      testkit::run_command("tmux -L " + socket_ + " -f /dev/null new-session -d -s test -x " +
                               std::to_string(columns) + " -y " + std::to_string(rows) + " " + quote(command),
                           &output);
  INFO(output);
  REQUIRE(rc == 0);
}

std::string Tmux::capture() {
  std::string output;
  testkit::run_command("tmux -L " + socket_ + " capture-pane -p -t test", &output);
  return output;
}

void Tmux::send_keys(const std::string& keys) {
  REQUIRE(testkit::run_command("tmux -L " + socket_ + " send-keys -t test " + keys) == 0);
}

}  // namespace rankstat::ops_test
