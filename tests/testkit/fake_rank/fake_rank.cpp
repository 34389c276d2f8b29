#include "fake_rank.hpp"

#include <signal.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <cstdio>
#include <stdexcept>

#include "rankstat/shmproto/naming.hpp"

namespace rankstat::fake_rank {
namespace {

std::atomic<bool> g_stop{false};
static_assert(std::atomic<bool>::is_always_lock_free, "the stop flag is set from a signal handler");

void on_signal(int) {
  g_stop.store(true, std::memory_order_relaxed);
}

}  // namespace

void add_segment_flags(CLI::App& app, SegmentFlags& flags) {
  app.add_option("--instance", flags.instance, "Engine instance id")->capture_default_str();
  app.add_option("--model", flags.model, "served_model_name")->capture_default_str();
  app.add_option("--shm-dir", flags.shm_dir, "Segment directory (default $RANKSTAT_SHM_DIR or /dev/shm)");
  app.add_option("--extra", flags.extra_labels, "NAME=VALUE: an extra label of the segment (repeatable)")
      ->check([](const std::string& pair) {
        return pair.find('=') == std::string::npos ? std::string("expected NAME=VALUE") : std::string();
      });
  app.add_option("--ring-bytes", flags.ring_bytes, "Ring size in bytes")->capture_default_str();
  app.add_option_function<std::string>(
         "--shm-mode",
         [&flags](const std::string& octal) {
           flags.shm_mode = static_cast<std::uint32_t>(std::stoul(octal, nullptr, 8));
         },
         "Segment file mode, octal")
      ->check([](const std::string& octal) {
        const bool valid =
            !octal.empty() && octal.size() <= 4 && octal.find_first_not_of("01234567") == std::string::npos;
        return valid ? std::string() : std::string("expected an octal mode such as 0660");
      })
      ->default_str("0660");
  app.add_option("--shm-group", flags.shm_group, "Segment group: a name or a gid");
}

void add_rank_flags(CLI::App& app, RankPlace& place) {
  app.add_option("--tp", place.tp_rank, "This rank's tp_rank")->capture_default_str();
  app.add_option("--pp", place.pp_rank, "This rank's pp_rank")->capture_default_str();
  app.add_option("--dp", place.dp_rank, "This rank's dp_rank (-1: none)")->capture_default_str();
  app.add_option("--rank-key", place.rank_key, "Segment name suffix (default: derived from the ranks)");
}

ReporterOptions reporter_options(const SegmentFlags& flags, const RankPlace& place) {
  ReporterOptions options;
  options.shm_dir = flags.shm_dir;
  options.mode = flags.shm_mode;
  options.group = flags.shm_group;
  options.geometry.ring_bytes = flags.ring_bytes;
  shm::SegmentIdentity& id = options.identity;
  id.role = shm::Role::kScheduler;
  id.instance = flags.instance;
  id.model_name = flags.model;
  id.rank_key = place.rank_key;
  id.flags = flags.identity_flags;
  id.tp_rank = place.tp_rank;
  id.pp_rank = place.pp_rank;
  id.dp_rank = place.dp_rank;
  id.moe_ep_rank = place.moe_ep_rank;
  id.tp_size = place.tp_size;
  id.pp_size = place.pp_size;
  id.dp_size = place.dp_size;
  for (const std::string& pair : flags.extra_labels) {
    const auto equals = pair.find('=');
    if (equals == std::string::npos) throw std::invalid_argument("--extra " + pair + ": expected NAME=VALUE");
    id.extra_labels.emplace_back(pair.substr(0, equals), pair.substr(equals + 1));
  }
  return options;
}

std::optional<shm::GaugeMode> gauge_mode(std::string_view name) {
  for (std::uint32_t i = 0; i < shm::kGaugeModeCount; ++i) {
    const auto mode = static_cast<shm::GaugeMode>(i);
    if (shm::gauge_mode_name(mode) == name) return mode;
  }
  return std::nullopt;
}

void stop_on_signals() {
  struct sigaction action {};
  action.sa_handler = on_signal;
  sigaction(SIGTERM, &action, nullptr);
  sigaction(SIGINT, &action, nullptr);
}

bool stop_requested() noexcept {
  return g_stop.load(std::memory_order_relaxed);
}

void request_stop() noexcept {
  g_stop.store(true, std::memory_order_relaxed);
}

void add_exit_flag(CLI::App& app, ExitMode& mode) {
  app.add_option_function<std::string>(
         "--exit",
         [&mode](const std::string& name) {
           mode = name == "abandon" ? ExitMode::kAbandon : ExitMode::kClean;
         },
         "clean: close the segment; abandon: exit like a crash, the segment left as is")
      ->check(CLI::IsMember({"clean", "abandon"}))
      ->default_str("clean");
}

int finish(Reporter& reporter, ExitMode mode) {
  if (mode == ExitMode::kAbandon) {
    std::fflush(stdout);
    _exit(0);  // no close, no destructors: the segment stays as a crashed rank leaves it
  }
  reporter.close();
  return 0;
}

void announce(std::string_view line) {
  std::fwrite(line.data(), 1, line.size(), stdout);
  std::fputc('\n', stdout);
  std::fflush(stdout);
}

void announce_note(const Reporter& reporter) {
  if (!reporter.note().empty()) announce("note: " + reporter.note());
}

void announce_exit(std::initializer_list<Field> fields) {
  std::string line;
  for (const Field& f : fields) {
    if (!line.empty()) line += ' ';
    line.append(f.key).append("=").append(std::to_string(f.value));
  }
  announce(line);
}

}  // namespace rankstat::fake_rank
