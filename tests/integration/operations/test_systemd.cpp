// The systemd integration: the unit verifies cleanly and keeps /dev/shm shared with the engine, the
// install rules put every file where the unit expects it, and rankstatd speaks the sd_notify protocol
// (READY=1 once the first scan and the listener are up, WATCHDOG=1, RELOADING=1 on SIGHUP, STOPPING=1
// on SIGTERM) to a socket standing in for systemd.
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>

#include "operations_support.hpp"

using namespace rankstat::testkit;
using namespace rankstat::ops_test;
using namespace std::chrono_literals;

namespace {

// `key=value` lines of a unit, a sysusers/tmpfiles snippet or an environment file; comments skipped.
std::multimap<std::string, std::string> assignments(const std::string& path) {
  std::multimap<std::string, std::string> out;
  std::istringstream lines(read_file(path));
  std::string line;
  while (std::getline(lines, line)) {
    if (line.empty() || line[0] == '#' || line[0] == ';' || line[0] == '[') continue;
    const auto eq = line.find('=');
    if (eq == std::string::npos) continue;
    out.emplace(line.substr(0, eq), line.substr(eq + 1));
  }
  return out;
}

std::string single(const std::multimap<std::string, std::string>& unit, const std::string& key) {
  INFO("key " << key);
  REQUIRE(unit.count(key) == 1);
  return unit.find(key)->second;
}

// An AF_UNIX datagram socket playing systemd's notification socket.
class NotifySocket {
 public:
  explicit NotifySocket(std::string path) : path_(std::move(path)) {
    fd_ = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    REQUIRE(fd_ >= 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    REQUIRE(path_.size() < sizeof addr.sun_path);
    std::memcpy(addr.sun_path, path_.c_str(), path_.size() + 1);
    REQUIRE(::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  }
  ~NotifySocket() {
    ::close(fd_);
    ::unlink(path_.c_str());
  }
  NotifySocket(const NotifySocket&) = delete;
  NotifySocket& operator=(const NotifySocket&) = delete;
  const std::string& path() const { return path_; }

  // Collects datagrams until one contains `needle`; returns it, or "" on timeout. Every datagram seen
  // is kept in received().
  std::string wait_for(const std::string& needle, std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now())
              .count();
      if (left <= 0) return {};
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left)) != 1) continue;
      char buffer[4096];
      const ssize_t n = ::recv(fd_, buffer, sizeof buffer, 0);
      if (n <= 0) continue;
      received_.emplace_back(buffer, static_cast<std::size_t>(n));
      if (received_.back().find(needle) != std::string::npos) return received_.back();
    }
  }
  const std::vector<std::string>& received() const { return received_; }

 private:
  std::string path_;
  int fd_ = -1;
  std::vector<std::string> received_;
};

int count_containing(const std::vector<std::string>& messages, const std::string& needle) {
  int n = 0;
  for (const auto& m : messages) n += m.find(needle) != std::string::npos ? 1 : 0;
  return n;
}

// Runs `systemd-analyze verify` on `unit` in `dir` and checks that it says nothing on stderr:
// systemd-analyze exits 0 even on unknown keys and bad values, so stderr is what counts.
void check_verify_is_silent(const std::string& dir, const std::string& unit) {
  const std::string err_path = dir + "/stderr";
  std::string out;
  const int rc = run_command(
      "(cd " + dir + " && systemd-analyze verify --man=no ./" + unit + " 2> " + err_path + ")", &out);
  INFO("stdout: " << out);
  INFO("stderr: " << read_file(err_path));
  CHECK(rc == 0);
  CHECK(read_file(err_path).empty());
}

}  // namespace

TEST_CASE("systemd-analyze verify accepts rankstatd.socket with the service it activates") {
  TempDir dir("rankstat-unit");
  REQUIRE(run_command("sed 's|^ExecStart=/usr/bin/rankstatd |ExecStart=" + binary_path("daemon/rankstatd") +
                      " --web.systemd-socket |' " + source_path("systemd/rankstatd.service") + " > " +
                      dir.path() + "/rankstatd.service && cp " + source_path("systemd/rankstatd.socket") +
                      " " + dir.path()) == 0);
  check_verify_is_silent(dir.path(), "rankstatd.socket");
  const auto socket = assignments(source_path("systemd/rankstatd.socket"));
  CHECK(single(socket, "ListenStream") == "9473");  // the daemon's default port
  CHECK(read_file(source_path("systemd/rankstatd.socket")).find("--web.systemd-socket") != std::string::npos);
}

TEST_CASE("systemd-analyze verify accepts rankstatd.service without a word on stderr") {
  TempDir dir("rankstat-unit");
  // verify fails when ExecStart's binary is missing: point it at the one just built.
  const std::string unit = dir.path() + "/rankstatd.service";
  REQUIRE(run_command("sed 's|^ExecStart=/usr/bin/rankstatd |ExecStart=" + binary_path("daemon/rankstatd") +
                      " |' " + source_path("systemd/rankstatd.service") + " > " + unit) == 0);
  REQUIRE(read_file(unit).find("ExecStart=" + binary_path("daemon/rankstatd")) != std::string::npos);
  check_verify_is_silent(dir.path(), "rankstatd.service");

  // The hardening keeps the exposure score low (systemd's own scale: below 2 is "OK").
  std::string security;
  REQUIRE(run_command("systemd-analyze security --offline=true " + unit, &security) == 0);
  INFO(security);
  const auto at = security.find("Overall exposure level for rankstatd.service: ");
  REQUIRE(at != std::string::npos);
  const double exposure = std::strtod(
      security.c_str() + at + std::strlen("Overall exposure level for rankstatd.service: "), nullptr);
  CHECK(exposure < 2.0);
}

TEST_CASE("the unit is a notify service with a watchdog that restarts on failure and keeps /dev/shm shared") {
  const auto unit = assignments(source_path("systemd/rankstatd.service"));
  CHECK(single(unit, "Type") == "notify");
  CHECK(single(unit, "NotifyAccess") == "main");
  CHECK(single(unit, "WatchdogSec") == "30s");
  CHECK(single(unit, "Restart") == "on-failure");
  CHECK(single(unit, "User") == "rankstatd");
  CHECK(single(unit, "Group") == "rankstat");
  CHECK(single(unit, "EnvironmentFile") == "-/etc/default/rankstatd");
  CHECK(single(unit, "ExecStart").rfind("/usr/bin/rankstatd ", 0) == 0);
  CHECK(single(unit, "ExecStart").find("$ARGS") != std::string::npos);
  CHECK(single(unit, "ExecReload") == "/bin/kill -HUP $MAINPID");
  CHECK(single(unit, "WantedBy") == "multi-user.target");
  // Hardening that must be there...
  for (const char* key :
       {"NoNewPrivileges", "ProtectHome", "PrivateTmp", "PrivateDevices", "ProtectKernelTunables",
        "RestrictNamespaces", "LockPersonality", "MemoryDenyWriteExecute"}) {
    INFO(key);
    CHECK(single(unit, key) == "yes");
  }
  CHECK(single(unit, "ProtectSystem") == "strict");
  CHECK(single(unit, "RestrictAddressFamilies") == "AF_UNIX AF_INET AF_INET6");
  CHECK(single(unit, "CapabilityBoundingSet").empty());
  // ...and what would break sharing the engine's segments must not be.
  CHECK(single(unit, "RemoveIPC") == "no");
  CHECK(single(unit, "PrivateIPC") == "no");
  CHECK(unit.count("DynamicUser") == 0);
  CHECK(unit.count("PrivateUsers") == 0);
  CHECK(single(unit, "ProtectProc") == "default");  // the engine's /proc/<pid> must stay visible
  for (const auto& [key, value] : unit) {
    INFO(key << "=" << value);
    CHECK(value.find("/dev/shm") == std::string::npos);  // no InaccessiblePaths= / ReadOnlyPaths= on it
  }

  const auto defaults = assignments(source_path("systemd/rankstatd.default"));
  CHECK(single(defaults, "ARGS") == "\"\"");

  const std::string sysusers = read_file(source_path("systemd/rankstatd.sysusers"));
  CHECK(sysusers.find("\ng rankstat ") != std::string::npos);
  CHECK(sysusers.find("\nu rankstatd  -:rankstat ") != std::string::npos);
  // systemd-sysusers parses it: a dry run against an empty root creates both, and nothing else.
  TempDir root("rankstat-sysusers-root");
  REQUIRE(run_command("mkdir -p " + root.path() + "/etc") == 0);
  std::string dry_run;
  const int rc = run_command(
      "systemd-sysusers --dry-run --root=" + root.path() + " " + source_path("systemd/rankstatd.sysusers"),
      &dry_run);
  INFO(dry_run);
  CHECK(rc == 0);
  CHECK(dry_run.find("group 'rankstat'") != std::string::npos);
  CHECK(dry_run.find("user 'rankstatd'") != std::string::npos);

  const std::string tmpfiles = read_file(source_path("systemd/rankstatd.tmpfiles"));
  CHECK(tmpfiles.find("\nd /dev/shm/rankstat 2770 root rankstat -") != std::string::npos);
}

TEST_CASE(
    "the install rules put binaries, unit, environment file, sysusers snippet and docs where the unit "
    "expects them") {
  TempDir stage("rankstat-install");
  std::string output;
  // The per-directory install scripts: exactly what `cmake --install build --prefix /usr` runs for them,
  // without needing every other target of the build tree built.
  for (const char* dir : {"daemon", "cli", "systemd"}) {
    const int rc = run_command("DESTDIR=" + stage.path() + " cmake -DCMAKE_INSTALL_PREFIX=/usr -P " +
                                   binary_path(std::string(dir) + "/cmake_install.cmake"),
                               &output);
    INFO(output);
    REQUIRE(rc == 0);
  }
  const std::string root = stage.path();
  for (const char* file :
       {"/usr/bin/rankstatd", "/usr/bin/rankstat", "/usr/lib/systemd/system/rankstatd.service",
        "/usr/lib/systemd/system/rankstatd.socket", "/etc/default/rankstatd",
        "/usr/lib/sysusers.d/rankstatd.conf", "/usr/lib/tmpfiles.d/rankstatd.conf",
        "/usr/share/doc/rankstat/operations.md", "/usr/share/doc/rankstat/api.md",
        "/usr/share/doc/rankstat/README.md", "/usr/share/doc/rankstat/examples/prometheus/rankstat.rules.yml",
        "/usr/share/doc/rankstat/examples/grafana/rankstat-overview.json"}) {
    INFO(file);
    CHECK(access((root + file).c_str(), R_OK) == 0);
  }
  CHECK(access((root + "/usr/bin/rankstat").c_str(), X_OK) == 0);
  // The unit starts the binary the install put there, and documents the guide it installed.
  const auto unit = assignments(root + "/usr/lib/systemd/system/rankstatd.service");
  const std::string exec = single(unit, "ExecStart");
  CHECK(access((root + exec.substr(0, exec.find(' '))).c_str(), X_OK) == 0);
  const std::string documentation = single(unit, "Documentation");
  REQUIRE(documentation.rfind("file:", 0) == 0);
  CHECK(access((root + documentation.substr(5)).c_str(), R_OK) == 0);
  // An operator's /etc/default/rankstatd survives a reinstall.
  { std::ofstream(root + "/etc/default/rankstatd") << "ARGS=\"--log.level=debug\"\n"; }
  REQUIRE(run_command("DESTDIR=" + root + " cmake -DCMAKE_INSTALL_PREFIX=/usr -P " +
                      binary_path("systemd/cmake_install.cmake")) == 0);
  CHECK(read_file(root + "/etc/default/rankstatd") == "ARGS=\"--log.level=debug\"\n");
  // Any other prefix keeps everything under it.
  TempDir local("rankstat-install-local");
  REQUIRE(run_command("DESTDIR=" + local.path() + " cmake -DCMAKE_INSTALL_PREFIX=/usr/local -P " +
                      binary_path("systemd/cmake_install.cmake")) == 0);
  CHECK(access((local.path() + "/usr/local/etc/default/rankstatd").c_str(), R_OK) == 0);
  CHECK(access((local.path() + "/usr/local/lib/systemd/system/rankstatd.service").c_str(), R_OK) == 0);
}

TEST_CASE(
    "rankstatd sends READY=1 once it listens and has scanned, feeds the watchdog, and STOPPING=1 on "
    "SIGTERM") {
  TempDir shm;
  TempDir files("rankstat-notify");
  auto writer = start_writer(shm, {"--instance=sd", "--tp=0", "--running=2", "--hold-seconds=60"});
  REQUIRE(wait_until([&] { return shm.list().size() == 1; }, 10s));
  NotifySocket notify(files.path() + "/notify.sock");
  const std::string address_file = files.path() + "/address";
  const std::string log = files.path() + "/rankstatd.log";
  ChildProcess daemon({binary_path("daemon/rankstatd"), "--web.listen-address=127.0.0.1:0",
                       "--shm.dir=" + shm.path(), "--web.address-file=" + address_file, "--log.level=debug"},
                      {{"NOTIFY_SOCKET", notify.path()}, {"WATCHDOG_USEC", "400000"}}, log);

  const std::string ready = notify.wait_for("READY=1", 15s);
  INFO("log:\n" << read_file(log));
  REQUIRE_FALSE(ready.empty());
  CHECK(ready.find("STATUS=") != std::string::npos);
  // READY means ready: the listener answers and the first scan has found the rank.
  const std::string address = read_file(address_file);
  REQUIRE(address.rfind(':') != std::string::npos);
  const int port = std::atoi(address.c_str() + address.rfind(':') + 1);
  auto readyz = http_get("127.0.0.1", port, "/readyz");
  REQUIRE(readyz);
  CHECK(readyz->status == 200);
  auto ranks = http_get("127.0.0.1", port, "/api/v1/ranks");
  REQUIRE(ranks);
  CHECK(ranks->body.find("sd.scheduler.tp0-pp0-ep0") != std::string::npos);
  CHECK(count_containing(notify.received(), "READY=1") == 1);

  // The watchdog is fed from the event loop at half of WATCHDOG_USEC.
  REQUIRE_FALSE(notify.wait_for("WATCHDOG=1", 3s).empty());
  REQUIRE_FALSE(notify.wait_for("WATCHDOG=1", 3s).empty());

  // SIGHUP: RELOADING=1, then READY=1 again.
  daemon.signal(SIGHUP);
  CHECK_FALSE(notify.wait_for("RELOADING=1", 5s).empty());
  CHECK_FALSE(notify.wait_for("READY=1", 5s).empty());

  const auto stop_started = std::chrono::steady_clock::now();
  daemon.signal(SIGTERM);
  CHECK_FALSE(notify.wait_for("STOPPING=1", 5s).empty());
  CHECK(daemon.wait_for(15s) == 0);
  // Nothing in flight: it exits at once rather than at its 5 s shutdown deadline.
  CHECK(std::chrono::steady_clock::now() - stop_started < 3s);
  writer->signal(SIGTERM);
  CHECK(writer->wait_for(10s) == 0);
}

TEST_CASE(
    "SIGHUP re-reads --config.file: new settings apply, the reload is logged and counted, a bad file is "
    "refused") {
  TempDir shm;
  TempDir files("rankstat-reload");
  const std::string config = files.path() + "/rankstatd.conf";
  { std::ofstream(config) << "# rankstatd settings\nlog.level = \"info\"\n"; }
  auto writer = start_writer(shm, {"--instance=hup", "--tp=0", "--hold-seconds=60"});
  REQUIRE(wait_until([&] { return shm.list().size() == 1; }, 10s));
  DaemonUnderTest daemon(shm.path(), {"--config.file=" + config, "--liveness.interval=50ms"});
  auto reloads = [&](const std::string& result) {
    auto r = daemon.get("/metrics");
    REQUIRE(r);
    return value_of(r->body, "rankstat_config_reloads_total", {"result=\"" + result + "\""}).value_or(-1);
  };
  auto rank_state = [&] {
    const CliResult r = run_cli({address_flag(daemon), "show", "hup.scheduler.tp0-pp0-ep0", "--json"});
    return r.exit_code == 0 ? std::string(parse_object(r.out).at("state").as_string()) : std::string("?");
  };
  REQUIRE(wait_until([&] { return rank_state() == "LIVE"; }, 10s));
  CHECK(reloads("success") == 0);

  daemon.process().signal(SIGHUP);
  REQUIRE(wait_until([&] { return reloads("success") == 1; }, 10s));
  CHECK(daemon.log().find("configuration reloaded") != std::string::npos);

  // A shorter stall threshold takes effect without a restart; at warn level the info line is gone.
  { std::ofstream(config) << "log.level = \"warn\"\nliveness.stall-after = \"300ms\"\n"; }
  daemon.process().signal(SIGHUP);
  REQUIRE(wait_until([&] { return reloads("success") == 2; }, 10s));
  std::size_t reloaded_lines = 0;
  const std::string log = daemon.log();
  for (auto at = log.find("configuration reloaded"); at != std::string::npos;
       at = log.find("configuration reloaded", at + 1)) {
    ++reloaded_lines;
  }
  CHECK(reloaded_lines == 1);
  writer->signal(SIGSTOP);
  CHECK(wait_until([&] { return rank_state() == "STALLED"; }, 10s));
  writer->signal(SIGCONT);

  // A file that does not parse keeps the running configuration and says so.
  { std::ofstream(config) << "log.level = \"loud\"\n"; }
  daemon.process().signal(SIGHUP);
  REQUIRE(wait_until([&] { return reloads("failure") == 1; }, 10s));
  CHECK(reloads("success") == 2);
  CHECK(daemon.log().find("configuration reload failed") != std::string::npos);
  CHECK(daemon.stop() == 0);
  writer->signal(SIGTERM);
  CHECK(writer->wait_for(10s) == 0);
}
