// Helpers for the operations tests: running the rankstat CLI with its stdout and stderr kept apart,
// starting writer ranks, parsing JSON, a tmux session on a private socket.
#pragma once

#include <boost/json/object.hpp>
#include <boost/json/value.hpp>

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "prometheus_under_test.hpp"
#include "testkit.hpp"

namespace rankstat::ops_test {

struct CliResult {
  int exit_code = -1;  // -1: did not finish in time (killed)
  std::string out;
  std::string err;
};

std::string cli_path();

// Runs build/cli/rankstat with `args`; RANKSTAT_ADDRESS and RANKSTAT_SHM_DIR are cleared unless `env`
// sets them, so the tests never read a real daemon or /dev/shm by accident.
CliResult run_cli(const std::vector<std::string>& args, const std::map<std::string, std::string>& env = {},
                  std::chrono::milliseconds timeout = std::chrono::seconds(20));

// "--address=127.0.0.1:<port>"
std::string address_flag(const testkit::DaemonUnderTest& daemon);

// A scriptable writer rank (tests/integration/test_writer.cpp) publishing into `shm`.
std::unique_ptr<testkit::ChildProcess> start_writer(const testkit::TempDir& shm,
                                                    const std::vector<std::string>& args);

// Parses a JSON object; fails the test (REQUIRE) when it is not one.
boost::json::object parse_object(const std::string& text);
// The object under `key` (REQUIREs that it is one). Takes an object, not a value: converting an object to
// a value would copy it, and the reference returned would dangle.
const boost::json::object& object_at(const boost::json::object& o, const std::string& key);
// The rank entry with this id in a ranks document (REQUIREs that it exists).
const boost::json::object& rank_by_id(const boost::json::object& doc, const std::string& id);
double number(const boost::json::value& v);
// A JSON string's text ("" for anything else), for comparing with std::string.
std::string text(const boost::json::value& v);

// A tmux server on a private socket, killed on destruction.
class Tmux {
 public:
  Tmux();
  ~Tmux();
  Tmux(const Tmux&) = delete;
  Tmux& operator=(const Tmux&) = delete;
  // A detached session of the given size running `command` through /bin/sh.
  void start(const std::string& command, int columns, int rows);
  std::string capture();
  void send_keys(const std::string& keys);

 private:
  std::string socket_;
};

}  // namespace rankstat::ops_test
