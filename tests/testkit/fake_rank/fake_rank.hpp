// A fake engine rank: what every program that plays one shares. Four programs play ranks — the
// integration-test writer (tests/integration/test_writer.cpp), the fault-test writer
// (tests/integration/faults/fault_writer.cpp), the benchmark writer (bench/bench_writer.cpp) and the
// example engine (deploy/example_engine/) — and each keeps only its own job (scripted values and faults,
// a metric set and its rate, a simulated scheduler). This holds the rest, once:
//   - the segment flags under one spelling, and their one translation into ReporterOptions;
//   - stop on SIGTERM/SIGINT;
//   - the lines a rank prints on stdout, which the tests (testkit::RankProcess) and bench/run_bench.py
//     read: "note: <Reporter::note()>", "ready", and at exit one line of key=value fields;
//   - the main loop, paced by the step or at a fixed cadence.
//
// The example engine is built without the tests, so this depends on the client library (and CLI11 in
// its .cpp) only. Thread contract: the stop flag is process-wide and async-signal-safe; everything else
// is called from the thread that owns the Reporter.
#pragma once

#include <chrono>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "rankstat/reporter.hpp"

namespace CLI {
class App;
}

namespace rankstat::fake_rank {

// What a rank's command line says about its segment. Each program gives its own defaults (designated
// initializers) before add_segment_flags(); the flags then override them. Every member has an initializer, so
// a designated initializer may name only the ones it sets.
struct SegmentFlags {
  std::string instance = "default";
  std::string model{};
  std::string shm_dir{};                    // empty: $RANKSTAT_SHM_DIR, else /dev/shm
  std::vector<std::string> extra_labels{};  // NAME=VALUE
  std::uint64_t ring_bytes = shm::SegmentGeometry{}.ring_bytes;
  std::uint32_t shm_mode = 0660;
  std::string shm_group{};           // empty: $RANKSTAT_SHM_GROUP, else the process's group
  std::uint32_t identity_flags = 0;  // shm::kFlag*: each program has its own switch for these
};

// --instance, --model, --shm-dir, --extra NAME=VALUE (repeatable), --ring-bytes, --shm-mode (octal),
// --shm-group.
void add_segment_flags(CLI::App& app, SegmentFlags& flags);

// Where one rank sits in its engine.
struct RankPlace {
  std::int32_t tp_rank = 0;
  std::int32_t pp_rank = 0;
  std::int32_t dp_rank = shm::kRankUnset;
  std::int32_t moe_ep_rank = 0;
  std::int32_t tp_size = 1;
  std::int32_t pp_size = 1;
  std::int32_t dp_size = 1;
  std::string rank_key;  // the segment name's suffix; empty: derived from the ranks
};

// --tp, --pp, --dp as this process's ranks, and --rank-key, for a program that is one rank (the
// example engine's --tp/--pp/--dp are sizes: its own).
void add_rank_flags(CLI::App& app, RankPlace& place);

// The one translation of a rank's flags into ReporterOptions. Throws std::invalid_argument for an
// --extra without '='.
ReporterOptions reporter_options(const SegmentFlags& flags, const RankPlace& place);

// A gauge mode by prometheus_client's name ("livemostrecent", ...), as scripted values spell it; nullopt
// for any other text.
std::optional<shm::GaugeMode> gauge_mode(std::string_view name);

// SIGTERM and SIGINT set the stop flag (no SA_RESTART: a sleep ends early only if it would anyway).
void stop_on_signals();
bool stop_requested() noexcept;
void request_stop() noexcept;

// How a test rank leaves: kClean closes its segment (the daemon retires it); kAbandon exits like a
// crash, leaving the segment exactly as it is.
enum class ExitMode { kClean, kAbandon };
// --exit clean|abandon.
void add_exit_flag(CLI::App& app, ExitMode& mode);
// Ends the rank as `mode` says; returns the process's exit status (kAbandon does not return).
int finish(Reporter& reporter, ExitMode mode);

// The stdout protocol. Every line is flushed at once: the reader is a test or a script on a pipe.
void announce(std::string_view line);
// "note: <Reporter::note()>" when the segment went under another name than its identity's.
void announce_note(const Reporter& reporter);
inline void announce_ready() {
  announce("ready");
}
struct Field {
  std::string_view key;
  std::uint64_t value;
};
// The exit line: "key=value key=value ...", in the order given.
void announce_exit(std::initializer_list<Field> fields);

inline constexpr double kForever = std::numeric_limits<double>::infinity();
// A rank that only holds heartbeats this often (well inside the daemon's liveness window).
inline constexpr std::chrono::milliseconds kHoldPause{20};

// A rank's main loop, from its construction until a stop signal or `seconds` later (kForever: no
// limit). The deadline is checked before every step, so a step never starts after it.
class Loop {
 public:
  explicit Loop(double seconds) : seconds_(seconds) {}
  std::chrono::steady_clock::time_point start() const { return start_; }
  double elapsed() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }
  bool running() const { return !stop_requested() && elapsed() < seconds_; }

  // `step(elapsed_seconds)` returns the pause before the next step (zero: none, a flood).
  template <class Step>
  void run(Step&& step) {
    while (running()) {
      const auto pause = step(elapsed());
      if (pause > pause.zero()) std::this_thread::sleep_for(pause);
    }
  }
  // `step(elapsed_seconds)` at start + phase, then every `period` after that: a late step is made up
  // at once, so the rate holds over time.
  template <class Step>
  void run_every(std::chrono::duration<double> period, std::chrono::duration<double> phase, Step&& step) {
    using Duration = std::chrono::steady_clock::duration;
    auto next = start_ + std::chrono::duration_cast<Duration>(phase);
    while (running()) {
      std::this_thread::sleep_until(next);
      next += std::chrono::duration_cast<Duration>(period);
      step(elapsed());
    }
  }

 private:
  double seconds_;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

// One hold step: a heartbeat, and the pause before the next.
inline std::chrono::milliseconds hold(Reporter& reporter) {
  reporter.heartbeat();
  return kHoldPause;
}

}  // namespace rankstat::fake_rank
