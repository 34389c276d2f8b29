// The rankstat CLI against a live daemon and against the segments directly: JSON checked field by
// field, both sources compared, exit codes, liveness states.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <boost/json/serialize.hpp>
#include <catch2/catch.hpp>
#include <fstream>
#include <sstream>

#include "operations_support.hpp"

using namespace rankstat::testkit;
using namespace rankstat::ops_test;
using namespace std::chrono_literals;

namespace {

// Three scheduler ranks of instance "ops", DP 0..2, with known queue sizes; dp1 uses priorities.
std::vector<std::unique_ptr<ChildProcess>> start_three_ranks(const TempDir& shm) {
  std::vector<std::unique_ptr<ChildProcess>> writers;
  for (int dp = 0; dp < 3; ++dp) {
    std::vector<std::string> args = {"--instance=ops",
                                     "--tp=0",
                                     "--dp=" + std::to_string(dp),
                                     "--running=" + std::to_string(10 + dp),
                                     "--queue=" + std::to_string(dp),
                                     "--events=4",
                                     "--hold-seconds=60"};
    if (dp == 1) args.push_back("--priorities");
    writers.push_back(start_writer(shm, args));
  }
  REQUIRE(wait_until([&] { return shm.list().size() == 3; }, 10s));
  return writers;
}

std::string rank_id(int dp) {
  return "ops.scheduler.tp0-pp0-ep0-dp" + std::to_string(dp);
}

// The daemon lists `count` ranks, all LIVE, each with everything it wrote drained.
void wait_for_daemon(DaemonUnderTest& daemon, std::size_t count) {
  REQUIRE(wait_until(
      [&] {
        auto r = daemon.get("/api/v1/ranks");
        if (!r || r->status != 200) return false;
        const auto doc = parse_object(r->body);
        const auto& ranks = doc.at("ranks").as_array();
        if (ranks.size() != count) return false;
        for (const auto& rank : ranks) {
          if (rank.at("state") != "LIVE" || rank.at("records_drained") != rank.at("records_written"))
            return false;
        }
        return true;
      },
      15s));
}

void stop_all(std::vector<std::unique_ptr<ChildProcess>>& writers) {
  for (auto& w : writers) w->signal(SIGTERM);
  for (auto& w : writers) CHECK(w->wait_for(10s).has_value());
}

// The fields of a summary that do not depend on who reads the segment, or when.
const char* const kStableSummaryFields[] = {"id",
                                            "instance",
                                            "role",
                                            "rank_key",
                                            "model_name",
                                            "engine_type",
                                            "ranks",
                                            "pid",
                                            "generation",
                                            "state",
                                            "records_written",
                                            "dropped_records",
                                            "oversize_records",
                                            "ring_bytes",
                                            "ring_quarantined",
                                            "layout_version",
                                            "priority_scheduling",
                                            "all_schedulers_metrics"};

// True while process `pid` has a mapping of the file `path` (its line in /proc/<pid>/maps).
bool maps_file(pid_t pid, const std::string& path) {
  std::ifstream maps("/proc/" + std::to_string(pid) + "/maps");
  std::string line;
  while (std::getline(maps, line)) {
    if (line.find(path) != std::string::npos) return true;
  }
  return false;
}

}  // namespace

TEST_CASE("rankstat ranks --json lists every rank the daemon serves, field by field") {
  TempDir shm;
  auto writers = start_three_ranks(shm);
  DaemonUnderTest daemon(shm.path());
  wait_for_daemon(daemon, 3);

  const CliResult result = run_cli({address_flag(daemon), "ranks", "--json"});
  INFO(result.err);
  REQUIRE(result.exit_code == 0);
  const auto doc = parse_object(result.out);
  CHECK(text(doc.at("shm_dir")) == shm.path());
  CHECK(doc.at("rejected_segments").as_object().empty());
  REQUIRE(doc.at("ranks").as_array().size() == 3);
  for (int dp = 0; dp < 3; ++dp) {
    const auto& r = rank_by_id(doc, rank_id(dp));
    INFO(boost::json::serialize(r));
    CHECK(r.at("instance") == "ops");
    CHECK(r.at("role") == "scheduler");
    CHECK(text(r.at("rank_key")) == "tp0-pp0-ep0-dp" + std::to_string(dp));
    CHECK(r.at("model_name") == "test-model");
    CHECK(r.at("engine_type") == "unified");
    const auto& ranks = r.at("ranks").as_object();
    CHECK(number(ranks.at("tp_rank")) == 0);
    CHECK(number(ranks.at("pp_rank")) == 0);
    CHECK(number(ranks.at("dp_rank")) == dp);
    CHECK(number(ranks.at("moe_ep_rank")) == 0);
    CHECK(number(ranks.at("tp_size")) == 1);
    CHECK(ranks.contains("attn_tp_rank"));
    CHECK(ranks.contains("attn_dp_rank"));
    CHECK(ranks.contains("attn_cp_rank"));
    CHECK(number(r.at("pid")) == writers[static_cast<std::size_t>(dp)]->pid());
    const std::string generation(r.at("generation").as_string());
    CHECK_FALSE(generation.empty());
    CHECK(generation.find_first_not_of("0123456789") == std::string::npos);
    CHECK(r.at("state") == "LIVE");
    CHECK(number(r.at("heartbeat_age_seconds")) >= 0);
    CHECK(number(r.at("heartbeat_age_seconds")) < 10);
    CHECK(number(r.at("records_per_second")) >= 0);
    CHECK(number(r.at("records_written")) >= 1);
    CHECK(number(r.at("records_drained")) == number(r.at("records_written")));
    CHECK(number(r.at("dropped_records")) == 0);
    CHECK(number(r.at("oversize_records")) == 0);
    CHECK(number(r.at("ring_bytes")) == 65536);
    CHECK(number(r.at("ring_fill_ratio")) >= 0);
    CHECK(number(r.at("ring_fill_ratio")) <= 1);
    CHECK(r.at("ring_quarantined") == false);
    CHECK(r.at("layout_version") == "3.0");
    CHECK(r.at("priority_scheduling") == (dp == 1));
    CHECK(r.at("all_schedulers_metrics") == false);
  }
  // The CLI's --json is the API's document, not a re-interpretation of it.
  const auto api = parse_object(daemon.get("/api/v1/ranks")->body);
  for (int dp = 0; dp < 3; ++dp) {
    const auto& from_cli = rank_by_id(doc, rank_id(dp));
    const auto& from_api = rank_by_id(api, rank_id(dp));
    CHECK(from_cli.size() == from_api.size());
    for (const auto& [key, value] : from_api) {
      INFO("field " << key);
      CHECK(from_cli.contains(key));
    }
  }

  const CliResult table = run_cli({address_flag(daemon), "ranks"});
  REQUIRE(table.exit_code == 0);
  INFO(table.out);
  CHECK(table.out.find("INSTANCE") != std::string::npos);
  CHECK(table.out.find("\x1b[") == std::string::npos);  // not a terminal: no colours
  for (int dp = 0; dp < 3; ++dp)
    CHECK(table.out.find("tp0-pp0-ep0-dp" + std::to_string(dp)) != std::string::npos);
  CHECK(table.out.find("LIVE") != std::string::npos);

  const CliResult filtered = run_cli({address_flag(daemon), "ranks", "--json", "--instance=other"});
  REQUIRE(filtered.exit_code == 0);
  CHECK(parse_object(filtered.out).at("ranks").as_array().empty());
  stop_all(writers);
}

TEST_CASE("rankstat --direct maps the segments read-only, consumes nothing and agrees with the daemon") {
  TempDir shm;
  auto writers = start_three_ranks(shm);

  // With no daemon at all: the records stay in the rings, the CLI only looks.
  const CliResult alone = run_cli({"--direct", "--shm-dir=" + shm.path(), "ranks", "--json"});
  INFO(alone.err);
  REQUIRE(alone.exit_code == 0);
  const auto before = parse_object(alone.out);
  REQUIRE(before.at("ranks").as_array().size() == 3);
  for (int dp = 0; dp < 3; ++dp) {
    const auto& r = rank_by_id(before, rank_id(dp));
    CHECK(r.at("state") == "LIVE");
    CHECK(r.at("records_drained").is_null());
    CHECK(number(r.at("ring_fill_ratio")) > 0);  // nobody drained the rank's records
  }
  // The environment variable names the directory as well.
  const CliResult by_env = run_cli({"--direct", "ranks", "--json"}, {{"RANKSTAT_SHM_DIR", shm.path()}});
  REQUIRE(by_env.exit_code == 0);
  CHECK(parse_object(by_env.out).at("ranks").as_array().size() == 3);

  // The daemon, started afterwards, still gets every record: the observer consumed none of them.
  DaemonUnderTest daemon(shm.path());
  wait_for_daemon(daemon, 3);
  const CliResult direct = run_cli({"--direct", "--shm-dir=" + shm.path(), "ranks", "--json"});
  const CliResult via_daemon = run_cli({address_flag(daemon), "ranks", "--json"});
  REQUIRE(direct.exit_code == 0);
  REQUIRE(via_daemon.exit_code == 0);
  const auto d = parse_object(direct.out);
  const auto a = parse_object(via_daemon.out);
  CHECK(d.at("shm_dir") == a.at("shm_dir"));
  REQUIRE(d.at("ranks").as_array().size() == a.at("ranks").as_array().size());
  for (int dp = 0; dp < 3; ++dp) {
    const auto& from_shm = rank_by_id(d, rank_id(dp));
    const auto& from_daemon = rank_by_id(a, rank_id(dp));
    // Same document shape...
    CHECK(from_shm.size() == from_daemon.size());
    for (const auto& [key, value] : from_daemon) {
      INFO("field " << key);
      CHECK(from_shm.contains(key));
    }
    // ...and the same values wherever the reader does not matter.
    for (const char* field : kStableSummaryFields) {
      INFO("rank " << dp << " field " << field);
      CHECK(from_shm.at(field) == from_daemon.at(field));
    }
    CHECK(from_shm.at("records_drained").is_null());
    CHECK(number(from_shm.at("ring_fill_ratio")) < 0.01);  // the daemon drains; the CLI sees its head
  }
  // The daemon drained everything and never saw a gap, though the CLI read the same rings meanwhile.
  const std::string metrics = daemon.get("/metrics")->body;
  for (const auto& s : samples_of(metrics, "rankstat_ring_sequence_gaps_total")) CHECK(s.value == 0);
  stop_all(writers);
}

TEST_CASE(
    "rankstat show prints one rank's snapshot, counters and histograms, the same from the daemon and "
    "directly") {
  TempDir shm;
  std::vector<std::unique_ptr<ChildProcess>> writers;
  writers.push_back(start_writer(shm, {"--instance=ops", "--tp=1", "--running=5", "--queue=2", "--events=8",
                                       "--priorities", "--hold-seconds=60"}));
  writers.push_back(start_writer(shm, {"--instance=ops", "--tp=2", "--running=1", "--hold-seconds=60"}));
  REQUIRE(wait_until([&] { return shm.list().size() == 2; }, 10s));
  DaemonUnderTest daemon(shm.path());
  wait_for_daemon(daemon, 2);
  const std::string id = "ops.scheduler.tp1-pp0-ep1";

  auto check_detail = [&](const boost::json::object& r) {
    INFO(boost::json::serialize(r));
    CHECK(text(r.at("id")) == id);
    CHECK(r.at("state") == "LIVE");
    const auto& scheduler = object_at(r, "scheduler");
    CHECK(scheduler.at("report_kind") == "decode");
    CHECK(number(scheduler.at("sequence")) == 0);
    CHECK(number(scheduler.at("age_seconds")) >= 0);
    const auto& fields = object_at(scheduler, "fields");
    const auto& basics = object_at(fields, "basics");
    CHECK(number(basics.at("num_running_reqs")) == 5);
    CHECK(number(basics.at("num_queue_reqs")) == 2);
    CHECK(number(basics.at("num_grammar_queue_reqs")) == 0);
    CHECK(number(basics.at("gen_throughput")) == Approx(101));
    const auto& pool = object_at(fields, "pool");
    CHECK(number(pool.at("token_usage")) == Approx(0.25));
    CHECK(pool.contains("kv_used_tokens"));
    CHECK(pool.contains("kv_evictable_tokens"));
    CHECK(pool.contains("kv_available_tokens"));
    for (const char* section : {"retraction", "disaggregation", "forward", "routing"}) {
      INFO(section);
      CHECK(fields.contains(section));
    }
    CHECK_FALSE(fields.contains("speculative"));  // an optional group the writer did not report
    CHECK_FALSE(fields.contains("lora"));
    const auto& priorities = fields.at("priorities").as_array();
    REQUIRE(priorities.size() == 1);
    CHECK(priorities[0].at("queue") == "num_running_reqs");
    CHECK(number(priorities[0].at("priority")) == 1);
    CHECK(number(priorities[0].at("count")) == 5);

    const auto& series = r.at("series").as_array();
    const boost::json::object* counter = nullptr;
    const boost::json::object* histogram = nullptr;
    for (const auto& s : series) {
      if (s.at("family") == "sglang:test_events_total") counter = &s.as_object();
      if (s.at("family") == "sglang:test_latency_seconds") histogram = &s.as_object();
    }
    REQUIRE(counter != nullptr);
    CHECK(counter->at("type") == "counter");
    CHECK(number(counter->at("value")) == 8);
    CHECK(counter->at("labels").as_object().at("kind") == "unit");
    REQUIRE(histogram != nullptr);
    CHECK(histogram->at("type") == "histogram");
    CHECK(number(histogram->at("count")) == 8);
    CHECK(number(histogram->at("sum")) == Approx(6.0));  // 2 × (0 + 0.5 + 1 + 1.5)
    const auto& buckets = histogram->at("buckets").as_array();
    REQUIRE(buckets.size() == 4);
    CHECK(number(buckets[0].at("le")) == Approx(0.1));
    CHECK(number(buckets[0].at("cumulative_count")) == 2);
    CHECK(number(buckets[1].at("cumulative_count")) == 6);
    CHECK(number(buckets[2].at("cumulative_count")) == 8);
    CHECK(buckets[3].at("le") == "+Inf");
    CHECK(number(buckets[3].at("cumulative_count")) == 8);
  };

  const CliResult via_daemon = run_cli({address_flag(daemon), "show", id, "--json"});
  INFO(via_daemon.err);
  REQUIRE(via_daemon.exit_code == 0);
  const auto from_daemon = parse_object(via_daemon.out);
  check_detail(from_daemon);

  const CliResult direct = run_cli({"--direct", "--shm-dir=" + shm.path(), "show", id, "--json"});
  INFO(direct.err);
  REQUIRE(direct.exit_code == 0);
  const auto from_shm = parse_object(direct.out);
  check_detail(from_shm);
  // The snapshot and the series are identical field by field; only the ages differ.
  auto without_age = [](boost::json::object scheduler) {
    scheduler.erase("age_seconds");
    return scheduler;
  };
  CHECK(without_age(from_shm.at("scheduler").as_object()) ==
        without_age(from_daemon.at("scheduler").as_object()));
  CHECK(from_shm.at("series") == from_daemon.at("series"));
  // Both documents come from the same builder (rankview): whole, they are the same but for what only a
  // consumer or the clock decides.
  auto comparable = [](boost::json::object r) {
    for (const char* by_nature :
         {"heartbeat_age_seconds", "records_per_second", "records_drained", "ring_fill_ratio"}) {
      r.erase(by_nature);
    }
    if (r.at("scheduler").is_object()) r["scheduler"].as_object().erase("age_seconds");
    return r;
  };
  INFO("direct:  " << boost::json::serialize(comparable(from_shm)));
  INFO("daemon:  " << boost::json::serialize(comparable(from_daemon)));
  CHECK(comparable(from_shm) == comparable(from_daemon));
  CHECK(from_shm.size() == from_daemon.size());

  // Shorter names work when they are unambiguous; the text page lists sections and series.
  for (const std::string& name : {std::string("tp1-pp0-ep1"), std::string("ops.tp1-pp0-ep1")}) {
    const CliResult text = run_cli({address_flag(daemon), "show", name});
    INFO(text.err);
    REQUIRE(text.exit_code == 0);
    INFO(text.out);
    CHECK(text.out.find(id) != std::string::npos);
    for (const char* expected :
         {"num_running_reqs", "token_usage", "pool", "by priority", "COUNTER",
          "sglang:test_events_total{kind=\"unit\"}", "HISTOGRAM", "sglang:test_latency_seconds"}) {
      INFO(expected);
      CHECK(text.out.find(expected) != std::string::npos);
    }
  }
  const CliResult direct_text = run_cli({"--direct", "--shm-dir=" + shm.path(), "show", "tp1-pp0-ep1"});
  REQUIRE(direct_text.exit_code == 0);
  CHECK(direct_text.out.find("sglang:test_latency_seconds") != std::string::npos);
  stop_all(writers);
}

TEST_CASE("exit codes tell a missing daemon (3), a missing rank (4) and a usage error (2) apart") {
  TempDir shm;
  TempDir empty;
  const std::string nobody = "--address=127.0.0.1:" + std::to_string(unused_port());

  const CliResult unreachable = run_cli({nobody, "ranks"});
  CHECK(unreachable.exit_code == 3);
  CHECK(unreachable.err.find("not reachable") != std::string::npos);
  CHECK(run_cli({nobody, "show", "a.scheduler.b"}).exit_code == 3);
  CHECK(run_cli({nobody, "top", "--iterations=1"}).exit_code == 3);
  CHECK(run_cli({"ranks"}, {{"RANKSTAT_ADDRESS", "127.0.0.1:" + std::to_string(unused_port())}}).exit_code ==
        3);

  const CliResult no_segments = run_cli({"--direct", "--shm-dir=" + empty.path(), "ranks"});
  CHECK(no_segments.exit_code == 3);
  CHECK(no_segments.err.find("no rankstat segments") != std::string::npos);
  CHECK(run_cli({"--direct", "--shm-dir=" + empty.path() + "/missing", "ranks", "--json"}).exit_code == 3);
  CHECK(run_cli({"--direct", "--shm-dir=" + empty.path(), "top", "--iterations=1"}).exit_code == 3);

  std::vector<std::unique_ptr<ChildProcess>> writers;
  writers.push_back(start_writer(shm, {"--instance=a", "--tp=0", "--hold-seconds=60"}));
  writers.push_back(start_writer(shm, {"--instance=b", "--tp=0", "--hold-seconds=60"}));
  REQUIRE(wait_until([&] { return shm.list().size() == 2; }, 10s));
  DaemonUnderTest daemon(shm.path());
  wait_for_daemon(daemon, 2);
  CHECK(run_cli({address_flag(daemon), "ranks"}).exit_code == 0);
  CHECK(run_cli({"ranks"}, {{"RANKSTAT_ADDRESS", "127.0.0.1:" + std::to_string(daemon.port())}}).exit_code ==
        0);
  const CliResult missing = run_cli({address_flag(daemon), "show", "a.scheduler.tp9-pp0-ep9"});
  CHECK(missing.exit_code == 4);
  CHECK(missing.err.find("no rank") != std::string::npos);
  CHECK(run_cli({address_flag(daemon), "show", "../../etc/passwd"}).exit_code == 4);
  CHECK(run_cli({address_flag(daemon), "show", "bad id"}).exit_code == 4);
  const CliResult ambiguous = run_cli({address_flag(daemon), "show", "tp0-pp0-ep0"});
  CHECK(ambiguous.exit_code == 4);
  CHECK(ambiguous.err.find("a.scheduler.tp0-pp0-ep0") != std::string::npos);
  CHECK(ambiguous.err.find("b.scheduler.tp0-pp0-ep0") != std::string::npos);
  CHECK(run_cli({address_flag(daemon), "show", "a.tp0-pp0-ep0"}).exit_code == 0);
  CHECK(run_cli({"--direct", "--shm-dir=" + shm.path(), "show", "a.scheduler.nope"}).exit_code == 4);
  CHECK(run_cli({"--direct", "--shm-dir=" + shm.path(), "show", "b.tp0-pp0-ep0"}).exit_code == 0);

  CHECK(run_cli({}).exit_code == 2);
  CHECK(run_cli({"--no-such-flag", "ranks"}).exit_code == 2);
  CHECK(run_cli({"frobnicate"}).exit_code == 2);
  CHECK(run_cli({"show"}).exit_code == 2);
  CHECK(run_cli({"top", "--sort=nonsense"}).exit_code == 2);
  CHECK(run_cli({"top", "--interval=soon"}).exit_code == 2);
  CHECK(run_cli({"--address=nowhere", "ranks"}).exit_code == 2);
  const CliResult help = run_cli({"--help"});
  CHECK(help.exit_code == 0);
  CHECK(help.out.find("Exit codes") != std::string::npos);
  const CliResult version = run_cli({"--version"});
  CHECK(version.exit_code == 0);
  CHECK(version.out.find("rankstat ") != std::string::npos);
  stop_all(writers);
}

TEST_CASE(
    "a crashed rank shows DEAD, a stopped one STALLED and a closed one CLOSED, from the daemon and "
    "directly") {
  TempDir shm;
  auto crashing = start_writer(shm, {"--instance=life", "--tp=0", "--hold-seconds=60", "--exit=abandon"});
  auto stopping = start_writer(shm, {"--instance=life", "--tp=1", "--hold-seconds=60"});
  auto closing = start_writer(shm, {"--instance=life", "--tp=2", "--hold-seconds=60"});
  REQUIRE(wait_until([&] { return shm.list().size() == 3; }, 10s));
  DaemonUnderTest daemon(shm.path(), {"--liveness.stall-after=500ms", "--liveness.interval=50ms"});
  wait_for_daemon(daemon, 3);

  crashing->signal(SIGKILL);  // no close: the segment stays, its process is gone
  REQUIRE(crashing->wait_for(10s).has_value());
  closing->signal(SIGTERM);  // a clean exit marks the segment closed
  REQUIRE(closing->wait_for(10s) == 0);
  stopping->signal(SIGSTOP);  // alive, but its heartbeat stops

  const std::map<std::string, std::string> expected = {{"life.scheduler.tp0-pp0-ep0", "DEAD"},
                                                       {"life.scheduler.tp1-pp0-ep1", "STALLED"},
                                                       {"life.scheduler.tp2-pp0-ep2", "CLOSED"}};
  auto states_match = [&](const std::vector<std::string>& args) {
    const CliResult r = run_cli(args);
    if (r.exit_code != 0) return false;
    const auto doc = parse_object(r.out);
    for (const auto& [id, state] : expected) {
      bool found = false;
      for (const auto& rank : doc.at("ranks").as_array()) {
        if (text(rank.at("id")) == id) found = text(rank.at("state")) == state;
      }
      if (!found) return false;
    }
    return true;
  };
  CHECK(wait_until([&] { return states_match({address_flag(daemon), "ranks", "--json"}); }, 15s));
  CHECK(wait_until(
      [&] {
        return states_match(
            {"--direct", "--shm-dir=" + shm.path(), "--stall-after=500ms", "ranks", "--json"});
      },
      15s));
  // The text table shows the states too.
  const CliResult table = run_cli({"--direct", "--shm-dir=" + shm.path(), "--stall-after=500ms", "ranks"});
  CHECK(table.out.find("DEAD") != std::string::npos);
  CHECK(table.out.find("STALLED") != std::string::npos);
  CHECK(table.out.find("CLOSED") != std::string::npos);

  // A stopped rank that resumes is LIVE again.
  stopping->signal(SIGCONT);
  CHECK(wait_until(
      [&] {
        const CliResult r = run_cli({"--direct", "--shm-dir=" + shm.path(), "--stall-after=500ms", "show",
                                     "life.scheduler.tp1-pp0-ep1", "--json"});
        return r.exit_code == 0 && parse_object(r.out).at("state") == "LIVE";
      },
      15s));
  stopping->signal(SIGTERM);
  CHECK(stopping->wait_for(10s) == 0);
}

TEST_CASE("rankstat --direct survives a segment truncated while it reads it and reports it as bus_error") {
  TempDir shm;
  auto healthy = start_writer(shm, {"--instance=healthy", "--tp=0", "--hold-seconds=60"});
  // Publishes, then only heartbeats on its header page.
  auto victim = start_writer(shm, {"--instance=victim", "--tp=0", "--hold-seconds=60"});
  const std::string healthy_id = "healthy.scheduler.tp0-pp0-ep0";
  const std::string victim_id = "victim.scheduler.tp0-pp0-ep0";
  const std::string victim_path = shm.path() + "/rankstat." + victim_id;
  // Both published under their final names (a writer's temporary file does not count).
  REQUIRE(wait_until(
      [&] {
        const auto names = shm.list();
        return std::count(names.begin(), names.end(), "rankstat." + healthy_id) == 1 &&
               std::count(names.begin(), names.end(), "rankstat." + victim_id) == 1;
      },
      10s));

  std::vector<std::string> command;
  off_t truncate_to = 0;
  SECTION("ranks, the file truncated to nothing") {
    // `ranks` reads only the header page. (The writer dies of SIGBUS too: whoever may truncate a
    // segment can kill its engine.)
    command = {"ranks", "--json"};
  }
  SECTION("show of that rank, only its header page left") {
    command = {"show", victim_id, "--json"};
    truncate_to = 4096;
  }
  SECTION("top, only the header page left") {
    command = {"top", "--json", "--iterations=3", "--interval=100ms"};
    truncate_to = 4096;
  }
  std::vector<std::string> argv = {cli_path(), "--direct", "--shm-dir=" + shm.path()};
  argv.insert(argv.end(), command.begin(), command.end());
  TempDir out_dir("rankstat-cli-out");
  const std::string out_path = out_dir.path() + "/out";  // stdout and stderr
  ChildProcess cli(argv, {}, out_path);
  // The first read samples records_written twice, 0.25 s apart, after mapping every segment: the
  // truncation lands between the mapping and the CLI's last read of it.
  REQUIRE(wait_until([&] { return maps_file(cli.pid(), victim_path); }, 10s));
  REQUIRE(::truncate(victim_path.c_str(), truncate_to) == 0);
  const std::optional<int> status = cli.wait_for(20s);
  REQUIRE(status.has_value());
  const std::string out = read_file(out_path);
  INFO("rankstat said: " << out);
  REQUIRE(*status != 128 + SIGBUS);
  if (command.front() == "ranks") {
    CHECK(*status == 0);
    const auto doc = parse_object(out);
    const auto& ranks = doc.at("ranks").as_array();
    REQUIRE(ranks.size() == 1);
    CHECK(text(ranks.front().at("id")) == healthy_id);
    CHECK(number(object_at(doc, "rejected_segments").at("bus_error")) == 1);
  } else if (command.front() == "show") {
    CHECK(*status == 1);
    CHECK(out.find("rank " + victim_id + " cannot be read") != std::string::npos);
    CHECK(out.find("(bus_error)") != std::string::npos);
    CHECK(victim->running());
  } else {
    CHECK(*status == 0);
    std::istringstream frames(out);
    std::string frame;
    int count = 0;
    while (std::getline(frames, frame)) {
      const auto doc = parse_object(frame);
      const auto& ranks = doc.at("ranks").as_array();
      REQUIRE(ranks.size() == 1);
      CHECK(text(ranks.front().at("id")) == healthy_id);
      // The faulted rank is not a row, but top still says a segment was refused.
      const auto& rejected = object_at(doc, "rejected_segments");
      CHECK(number(rejected.contains("bus_error") ? rejected.at("bus_error") : rejected.at("truncated")) ==
            1);
      ++count;
    }
    CHECK(count == 3);
    CHECK(victim->running());
  }
}
