// Segment admission: which files of the shm directory become generations the registry holds. A scan lists
// the directory, sweeps temporaries abandoned by dead creators, skips files refused before and unchanged,
// re-judges the trust of generations already held, keeps within the descriptor budget, refuses second
// names (hard links), and opens, validates and attaches a new generation (judging at once a writer that
// died while no daemon watched). Refusals are counted and logged by segment_refusals.cpp.
// Thread contract: called on the daemon's io thread only, like every SegmentRegistry method that changes
// state; nothing here locks.
#include "segment_registry.hpp"

#include <dirent.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>

#include "rankstat/shmproto/bus_guard.hpp"
#include "rankstat/shmproto/naming.hpp"
#include "rankstat/shmproto/process.hpp"

namespace rankstat {

namespace {
// A temporary older than this whose creator is gone was abandoned mid-creation.
constexpr std::int64_t kTemporaryMaxAgeSeconds = 60;
}  // namespace

bool SegmentRegistry::wanted(const std::string& instance) const {
  return options_.instances.empty() || std::find(options_.instances.begin(), options_.instances.end(),
                                                 instance) != options_.instances.end();
}

int SegmentRegistry::scan(std::uint64_t now_ns) {
  ++counters_.scans;
  DIR* dir = opendir(options_.directory.c_str());
  if (dir == nullptr) {
    const int error = errno;
    if (error == EMFILE || error == ENFILE) ++counters_.fd_exhaustion;
    spdlog::warn("cannot list shm directory {}: {}", options_.directory, shm::errno_text(error));
    return 0;
  }
  std::vector<std::string> names;
  std::vector<std::string> temporaries;
  // NOLINTNEXTLINE(concurrency-mt-unsafe): readdir is thread-safe on a stream no other thread uses
  while (const dirent* entry = readdir(dir)) {
    const std::string name = entry->d_name;
    if (shm::parse_temporary_pid(name)) {
      temporaries.push_back(name);
      continue;
    }
    const auto parsed = shm::parse_segment_name(name);
    if (parsed && wanted(parsed->instance)) names.push_back(name);
  }
  closedir(dir);
  for (const std::string& name : temporaries) sweep_temporary(name, now_ns);
  std::sort(names.begin(), names.end());
  int opened = 0;
  std::uint64_t held = 0;  // generations mapped: a descriptor each, and a pidfd for the live ones
  for (const auto& [name, t] : tracked_) held += (t.current ? 1u : 0u) + t.previous.size();
  bool over_budget_logged = false;
  std::set<RetiredTotals::GenerationKey> present;
  for (const std::string& name : names) {
    const std::string path = options_.directory + "/" + name;
    struct stat st {};
    if (lstat(path.c_str(), &st) != 0) continue;
    auto it = tracked_.find(name);
    if (it != tracked_.end()) {
      Tracked& t = it->second;
      if (t.current && t.current->inode() == st.st_ino && t.current->device() == st.st_dev) {
        // Same generation. Its mode and owner are checked again on every scan, not only at open: a
        // segment made world-writable, or given to another owner, after it was opened is no longer
        // believed. Its generation is dropped unfolded (its values may be forged) and the file refused
        // until it changes.
        std::string message;
        if (const auto refusal = distrust(st, shm::parse_segment_name(name)->instance, message)) {
          ++counters_.dropped_untrusted;
          t.current.reset();
          reject(name, st, Rejection::of(*refusal),
                 message + " (changed after it was opened; dropped from the exposition)", now_ns);
          continue;
        }
        present.insert({name, t.current->identity().generation});
        continue;
      }
      if (!t.current && t.retired_inode == st.st_ino && t.retired_device == st.st_dev)
        continue;  // retired, file kept
    }
    auto rejected = rejected_.find(name);
    if (rejected != rejected_.end() && !rejected->second.recheck && rejected->second.same_file(st)) {
      continue;  // unchanged since it was refused
    }
    if (2 * (held + 1) > fd_budget_) {
      // Over the descriptor budget: wait for descriptors (fewer ranks, a higher limit) rather than run
      // the daemon itself out of them. Retried every scan.
      ++counters_.open_retries;
      ++counters_.fd_exhaustion;
      if (!over_budget_logged) {
        over_budget_logged = true;
        note_resource_error(EMFILE,
                            "descriptor budget of " + std::to_string(fd_budget_) + " reached (" +
                                std::to_string(held) + " segments held); not opening " + name + " now",
                            now_ns);
        --counters_.fd_exhaustion;  // counted above
      }
      continue;
    }
    std::string distrust_message;
    if (const auto refusal = distrust(st, shm::parse_segment_name(name)->instance, distrust_message)) {
      // Judged before the hard-link check: a foreign segment renamed here (its inode still tracked under
      // its old name) is an untrusted owner's file, not a second name.
      reject(name, st, Rejection::of(*refusal), distrust_message, now_ns);
      continue;
    }
    if (const std::string* holder = inode_holder(st, name)) {
      // Segments are identified by (device, inode): a second name (ln) would count the rank twice.
      reject(name, st, {Rejection::Kind::kHardLink},
             "a second name (hard link) for the segment already read as " + *holder + "; counted once",
             now_ns);
      continue;
    }
    open_generation(name, st, now_ns);
    auto now_it = tracked_.find(name);
    if (now_it != tracked_.end() && now_it->second.current && now_it->second.current->inode() == st.st_ino) {
      ++opened;
      ++held;
      present.insert({name, now_it->second.current->identity().generation});
    }
  }
  if (!pruned_retired_generations_) {
    // Retired generations are remembered only while their file might still be found; after the first
    // scan, forget those whose file is gone, so the store does not grow with every restart.
    present.insert(retired_skipped_.begin(), retired_skipped_.end());
    std::set<std::string> unidentified(names.begin(), names.end());
    for (const auto& key : present) unidentified.erase(key.first);
    retired_.forget_generations_except(present, unidentified);
    pruned_retired_generations_ = true;
  }
  resolve_checkpoints();
  persist_retired();
  if (checkpoint_due_) {
    // A generation opened (its totals are checkpointed from the start) or lost its name to a successor
    // while alive: persisted now, not at the next scrape, which a daemon crash could forestall.
    std::string error;
    if (!save_checkpoints(error))
      spdlog::error("checkpoint not saved (retried at the next scrape): {}", error);
  }
  return opened;
}

const std::string* SegmentRegistry::inode_holder(const struct stat& st, const std::string& name) const {
  const auto same = [&](const RankSegment& s) { return s.inode() == st.st_ino && s.device() == st.st_dev; };
  for (const auto& [other, t] : tracked_) {
    if (other == name) continue;
    if (t.current && same(*t.current)) return &other;
    if (!t.current && t.retired_inode == st.st_ino && t.retired_device == st.st_dev) return &other;
    for (const auto& p : t.previous) {
      if (same(*p)) return &other;
    }
  }
  return nullptr;
}

void SegmentRegistry::sweep_temporary(const std::string& name, std::uint64_t) {
  const auto pid = shm::parse_temporary_pid(name);
  if (!pid) return;
  const std::string path = options_.directory + "/" + name;
  struct stat st {};
  if (lstat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return;
  const std::int64_t age = static_cast<std::int64_t>(shm::realtime_ns() / 1'000'000'000ull) - st.st_mtime;
  // Only a creator known to be gone: a failed check (out of descriptors) keeps the file.
  if (age < kTemporaryMaxAgeSeconds ||
      shm::probe_process_start(*pid).status != shm::ProcessStart::Status::kGone) {
    return;
  }
  if (::unlink(path.c_str()) == 0) {
    ++counters_.temporaries_swept;
    spdlog::info("removed {}: left behind by pid {}, which died while creating it", name, *pid);
  }
}

void SegmentRegistry::open_generation(const std::string& name, const struct stat& listed,
                                      std::uint64_t now_ns) {
  const std::string path = options_.directory + "/" + name;
  const std::string instance = shm::parse_segment_name(name)->instance;
  std::string message;
  // Judged on lstat before anything is opened or mapped (a symlink is never followed), then again on the
  // descriptor actually opened, so a file swapped in between is caught too.
  if (const auto refusal = distrust(listed, instance, message)) {
    reject(name, listed, Rejection::of(*refusal), message, now_ns);
    return;
  }
  shm::OpenedSegment opened;
  // The file may be truncated between open_segment's fstat and its reads of the header.
  const bool faulted =
      !shm::run_bus_guarded(nullptr, 0, [&] { opened = shm::open_segment(path, /*consumer=*/true); });
  if (faulted) {
    opened.file.reset();
    reject(name, listed, {Rejection::Kind::kBusError}, "the file shrank while its header was being read",
           now_ns);
    return;
  }
  if (opened.reason == shm::RejectReason::kNotReady) return;  // a writer mid-creation: next scan
  if (opened.reason == shm::RejectReason::kOpenFailed && shm::is_transient_open_error(opened.error)) {
    // Out of descriptors or memory says nothing about the file: not remembered as refused, so the next
    // scan tries again even though the file looks unchanged.
    ++counters_.open_retries;
    note_resource_error(opened.error, "cannot open segment " + name + " now", now_ns);
    return;
  }
  if (opened.reason != shm::RejectReason::kNone) {
    struct stat st {};
    reject(name, lstat(path.c_str(), &st) == 0 ? st : listed, {Rejection::Kind::kInvalid, {}, opened.reason},
           opened.message, now_ns);
    return;
  }
  struct stat held {};
  if (fstat(opened.file.fd(), &held) != 0) return;
  if (const auto refusal = distrust(held, instance, message)) {
    reject(name, held, Rejection::of(*refusal), message, now_ns);
    return;
  }
  if (const auto mismatch = shm::SegmentTrust::judge_header(opened.identity, instance, message)) {
    // Its series would be exported under the header's instance.
    reject(name, held, Rejection::of(*mismatch), message, now_ns);
    return;
  }
  {
    // Two consumers would split the records between them: warn when another live daemon drains this
    // segment (its pid and a recent consumer heartbeat in header group C).
    std::uint32_t consumer = 0;
    std::uint64_t consumer_heartbeat = 0;
    shm::run_bus_guarded(opened.file.bytes(), opened.file.size(), [&] {
      consumer = shm::shared(opened.file.header()->consumer_pid).load(std::memory_order_relaxed);
      consumer_heartbeat =
          shm::shared(opened.file.header()->consumer_heartbeat_ns).load(std::memory_order_relaxed);
    });
    constexpr std::uint64_t kConsumerFreshNs = 10'000'000'000ull;
    // The other consumer may have drained after `now_ns` was read: compare in both directions.
    const std::uint64_t age =
        now_ns >= consumer_heartbeat ? now_ns - consumer_heartbeat : consumer_heartbeat - now_ns;
    if (consumer != 0 && consumer != static_cast<std::uint32_t>(getpid()) && consumer_heartbeat != 0 &&
        age < kConsumerFreshNs &&
        shm::probe_process_start(consumer).status == shm::ProcessStart::Status::kFound &&
        !warned_other_consumer_) {
      warned_other_consumer_ = true;
      spdlog::warn(
          "segment {} is being drained by another consumer (pid {}): two rankstatd on one directory "
          "split every ring's records between them; run one daemon per --shm.dir",
          name, consumer);
    }
  }
  rejected_.erase(name);
  const RetiredTotals::GenerationKey key{name, opened.identity.generation};
  if (retired_.holds(key) || retired_.holds_nonce(opened.identity.generation)) {
    // Folded into the retired totals before a daemon restart: counting it again would double it.
    Tracked& t = tracked_[name];
    if (t.current) t.previous.push_back(std::move(t.current));
    t.retired_inode = opened.inode;
    t.retired_device = opened.device;
    retired_skipped_.insert(key);
    // Accounted for already (in memory, and on disk with --state.dir): the file has nothing left to give.
    if (shm::unlink_if_same_file(opened.file.fd(), path)) ++counters_.segments_unlinked;
    return;
  }
  const std::uint32_t pid = opened.identity.pid;
  const std::uint64_t start_ticks = opened.identity.pid_start_ticks;
  auto segment = std::make_unique<RankSegment>(name, path, std::move(opened), now_ns);
  segment->set_max_series(options_.max_series_per_segment);
  segment->set_integrals(&options_.integrals, exports_engine_metrics(segment->identity()),
                         retired_.checkpoints().take(key));
  Tracked& t = tracked_[name];
  if (t.current) {
    // A restarted rank renamed a new generation onto the name: drain what the old one still holds and
    // keep it (its totals stay in the sums until it is retired).
    drain_counted(*t.current, now_ns);
    t.current->refresh_cumulative();
    carry_ring_totals(t, *t.current);
    ++counters_.generations_replaced;
    // Its file is gone with its name: from now on only this daemon knows its totals. A dead one was
    // folded when it died; a live one (its writer's death not seen yet) is checkpointed at once.
    spdlog::info("segment {} replaced by a new generation (pid {} -> {})", name, t.current->identity().pid,
                 pid);
    t.previous.push_back(std::move(t.current));
  } else {
    spdlog::info("attached segment {} (pid {})", name, pid);
  }
  // A writer that could not record its start time is judged by its heartbeat. Any other writer whose
  // pid is gone, or names a process with another start time, died while no daemon watched it (before
  // this daemon started, or between two daemons): DEAD at once, as `rankstat --direct` says, and retired
  // after the grace period. A check that cannot tell (out of descriptors) leaves it LIVE for the
  // liveness pass to decide.
  t.pid_visible = start_ticks != 0;
  t.retired_inode = 0;
  t.retired_device = 0;
  checkpoint_due_ = true;
  segment->refresh_cumulative();
  note_faults(*segment, now_ns);
  resolve_declarations(segment.get());
  if (t.pid_visible && !segment->producer().closed) {
    const shm::ProcessStart probe = shm::probe_process_start(pid);
    const bool gone = probe.status == shm::ProcessStart::Status::kGone ||
                      (probe.status == shm::ProcessStart::Status::kFound && probe.ticks != start_ticks);
    if (probe.status == shm::ProcessStart::Status::kUnknown) {
      ++counters_.liveness_unknown;
      if (probe.error != 0)
        note_resource_error(probe.error, "cannot check pid " + std::to_string(pid), now_ns);
    }
    if (gone) {
      drain_counted(*segment, now_ns);
      segment->refresh_cumulative();
      segment->set_state(RankState::kDead, now_ns);
      fold(*segment, now_ns);
      spdlog::info("segment {} (pid {}): DEAD at attach (its writer exited while no daemon watched it)", name,
                   pid);
    }
  } else if (segment->producer().closed) {
    // Closed before this daemon started: its last records are drained now, as those of a generation
    // that closes while the daemon watches (drain_all only drains live ones).
    drain_counted(*segment, now_ns);
    segment->refresh_cumulative();
    segment->set_state(RankState::kClosed, now_ns);
    fold(*segment, now_ns);
  }
  t.current = std::move(segment);
}

}  // namespace rankstat
