// `rankstat top`: full screen in a real pseudo-terminal (tmux), plain tables when stdout is a file,
// one JSON document per refresh with --json.
#include <signal.h>

#include <boost/json/parse.hpp>
#include <catch2/catch.hpp>
#include <sstream>

#include "operations_support.hpp"

using namespace rankstat::testkit;
using namespace rankstat::ops_test;
using namespace std::chrono_literals;

namespace {

// Four DP ranks of instance "tty"; rank dp<i> runs 10 + 3i requests and queues i.
std::vector<std::unique_ptr<ChildProcess>> start_four_ranks(const TempDir& shm) {
  std::vector<std::unique_ptr<ChildProcess>> writers;
  for (int dp = 0; dp < 4; ++dp) {
    writers.push_back(start_writer(shm, {"--instance=tty", "--tp=0", "--dp=" + std::to_string(dp),
                                         "--running=" + std::to_string(10 + 3 * dp),
                                         "--queue=" + std::to_string(dp), "--hold-seconds=60"}));
  }
  REQUIRE(wait_until([&] { return shm.list().size() == 4; }, 10s));
  return writers;
}

std::string rank_id(int dp) {
  return "tty.scheduler.tp0-pp0-ep0-dp" + std::to_string(dp);
}

bool shows_every_rank(const std::string& screen, int ranks) {
  for (int dp = 0; dp < ranks; ++dp) {
    if (screen.find(rank_id(dp)) == std::string::npos) return false;
  }
  return true;
}

// Row order on the screen: the line index of each rank id.
std::vector<std::size_t> row_positions(const std::string& screen, int ranks) {
  std::vector<std::size_t> positions;
  for (int dp = 0; dp < ranks; ++dp) positions.push_back(screen.find(rank_id(dp)));
  return positions;
}

void stop_all(std::vector<std::unique_ptr<ChildProcess>>& writers) {
  for (auto& w : writers) w->signal(SIGTERM);
  for (auto& w : writers) CHECK(w->wait_for(10s).has_value());
}

}  // namespace

TEST_CASE("rankstat top in a terminal shows every rank, follows new ranks, sorts, reverses and quits on q") {
  TempDir shm;
  TempDir scratch("rankstat-top");
  auto writers = start_four_ranks(shm);
  DaemonUnderTest daemon(shm.path());
  const std::string exit_file = scratch.path() + "/exit";
  Tmux tmux;
  // The shell lingers after rankstat exits so the restored screen can be captured.
  tmux.start(cli_path() + " " + address_flag(daemon) + " top --interval=0.2 --sort=running; echo $? > " +
                 exit_file + "; sleep 30",
             160, 30);
  std::string screen;
  REQUIRE(wait_until(
      [&] {
        screen = tmux.capture();
        return shows_every_rank(screen, 4);
      },
      15s));
  INFO(screen);
  CHECK(screen.find("rankstat top") != std::string::npos);
  CHECK(screen.find("KV POOL") != std::string::npos);
  CHECK(screen.find("q quit") != std::string::npos);
  CHECK(screen.find("4 LIVE") != std::string::npos);
  // Sorted by running requests, largest first: dp3 (19) above dp0 (10).
  auto rows = row_positions(screen, 4);
  CHECK(rows[3] < rows[2]);
  CHECK(rows[2] < rows[1]);
  CHECK(rows[1] < rows[0]);

  // Refreshing: a rank that starts now appears without touching the terminal.
  writers.push_back(
      start_writer(shm, {"--instance=tty", "--tp=0", "--dp=4", "--running=50", "--hold-seconds=60"}));
  REQUIRE(wait_until(
      [&] {
        screen = tmux.capture();
        return shows_every_rank(screen, 5) && screen.find("5 LIVE") != std::string::npos;
      },
      15s));

  tmux.send_keys("r");  // reverse: smallest first
  REQUIRE(wait_until(
      [&] {
        screen = tmux.capture();
        return screen.find("(reversed)") != std::string::npos;
      },
      5s));
  rows = row_positions(screen, 5);
  CHECK(rows[0] < rows[1]);
  CHECK(rows[3] < rows[4]);

  tmux.send_keys("s");  // the next sort column after "running"
  REQUIRE(wait_until([&] { return tmux.capture().find("sort queue") != std::string::npos; }, 5s));

  tmux.send_keys("q");
  REQUIRE(wait_until([&] { return read_file(exit_file).find('\n') != std::string::npos; }, 10s));
  CHECK(read_file(exit_file) == "0\n");
  // The alternate screen is gone: the terminal shows what it showed before (nothing), not the view.
  screen = tmux.capture();
  INFO(screen);
  CHECK(screen.find("KV POOL") == std::string::npos);
  stop_all(writers);
}

TEST_CASE(
    "rankstat top quits cleanly on Ctrl-C and gives the terminal back, also reading segments directly") {
  TempDir shm;
  TempDir scratch("rankstat-top");
  auto writers = start_four_ranks(shm);
  const std::string exit_file = scratch.path() + "/exit";
  Tmux tmux;
  tmux.start(cli_path() + " --direct --shm-dir=" + shm.path() + " top --interval=0.2; echo $? > " +
                 exit_file + "; stty -a > " + scratch.path() + "/stty; sleep 30",
             150, 20);
  std::string screen;
  REQUIRE(wait_until(
      [&] {
        screen = tmux.capture();
        return shows_every_rank(screen, 4);
      },
      15s));
  CHECK(screen.find("direct " + shm.path()) != std::string::npos);
  tmux.send_keys("C-c");
  REQUIRE(wait_until([&] { return read_file(exit_file).find('\n') != std::string::npos; }, 10s));
  CHECK(read_file(exit_file) == "0\n");
  // Line editing and echo are back on.
  REQUIRE(wait_until([&] { return !read_file(scratch.path() + "/stty").empty(); }, 5s));
  const std::string stty = read_file(scratch.path() + "/stty");
  INFO(stty);
  CHECK(stty.find(" icanon") != std::string::npos);
  CHECK(stty.find(" echo ") != std::string::npos);
  CHECK(tmux.capture().find("KV POOL") == std::string::npos);
  stop_all(writers);
}

TEST_CASE("rankstat top prints one plain table per refresh when stdout is not a terminal") {
  TempDir shm;
  auto writers = start_four_ranks(shm);
  DaemonUnderTest daemon(shm.path());
  REQUIRE(wait_until(
      [&] {
        return run_cli({address_flag(daemon), "ranks"}).out.find("dp3") != std::string::npos;
      },
      10s));
  const CliResult result = run_cli({address_flag(daemon), "top", "--iterations=3", "--interval=100ms"});
  INFO(result.err);
  REQUIRE(result.exit_code == 0);
  INFO(result.out);
  CHECK(result.out.find('\x1b') == std::string::npos);  // no escapes, no alternate screen
  std::size_t headers = 0;
  for (auto at = result.out.find("rankstat top"); at != std::string::npos;
       at = result.out.find("rankstat top", at + 1)) {
    ++headers;
  }
  CHECK(headers == 3);
  for (int dp = 0; dp < 4; ++dp) {
    std::size_t rows = 0;
    for (auto at = result.out.find(rank_id(dp)); at != std::string::npos;
         at = result.out.find(rank_id(dp), at + 1)) {
      ++rows;
    }
    CHECK(rows == 3);
  }
  CHECK(result.out.find("q quit") == std::string::npos);  // no key help where keys are not read

  const CliResult direct = run_cli(
      {"--direct", "--shm-dir=" + shm.path(), "top", "--iterations=2", "--interval=100ms", "--sort=queue"});
  REQUIRE(direct.exit_code == 0);
  CHECK(direct.out.find(rank_id(3)) < direct.out.find(rank_id(0)));
  stop_all(writers);
}

TEST_CASE("rankstat top --json prints one document per refresh with a row per rank") {
  TempDir shm;
  auto writers = start_four_ranks(shm);
  DaemonUnderTest daemon(shm.path());
  REQUIRE(wait_until(
      [&] {
        return run_cli({address_flag(daemon), "ranks"}).out.find("dp3") != std::string::npos;
      },
      10s));
  const CliResult result =
      run_cli({address_flag(daemon), "top", "--json", "--iterations=2", "--interval=100ms"});
  REQUIRE(result.exit_code == 0);
  std::istringstream lines(result.out);
  std::string line;
  int documents = 0;
  while (std::getline(lines, line)) {
    if (line.empty()) continue;
    ++documents;
    const auto doc = parse_object(line);
    CHECK(number(doc.at("time")) > 1.6e9);
    const auto& ranks = doc.at("ranks").as_array();
    REQUIRE(ranks.size() == 4);
    for (int dp = 0; dp < 4; ++dp) {
      const auto& row = rank_by_id(doc, rank_id(dp));
      INFO(line);
      CHECK(row.at("instance") == "tty");
      CHECK(row.at("role") == "scheduler");
      CHECK(row.at("state") == "LIVE");
      CHECK(number(row.at("dp_rank")) == dp);
      CHECK(number(row.at("num_running_reqs")) == 10 + 3 * dp);
      CHECK(number(row.at("num_queue_reqs")) == dp);
      CHECK(number(row.at("token_usage")) == Approx(0.25));
      CHECK(number(row.at("gen_throughput")) == Approx(100));
      CHECK(row.at("spec_accept_length").is_null());  // speculative decoding not reported
      // The writer reports no KV tokens, so DP balance falls back to running requests (mean 14.5).
      CHECK(number(row.at("dp_imbalance")) == Approx((10.0 + 3 * dp) / 14.5));
      for (const char* key : {"kv_used_tokens", "kv_evictable_tokens", "kv_available_tokens", "fwd_occupancy",
                              "heartbeat_age_seconds", "tp_rank", "pp_rank"}) {
        INFO(key);
        CHECK(row.contains(key));
      }
    }
  }
  CHECK(documents == 2);
  stop_all(writers);
}
