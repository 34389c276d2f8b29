#include "segment_registry.hpp"

#include <dirent.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>

#include "aggregation.hpp"
#include "rankstat/shmproto/bus_guard.hpp"
#include "rankstat/shmproto/naming.hpp"
#include "rankstat/shmproto/process.hpp"
#include "rankstat/shmproto/scheduler_snapshot.hpp"

namespace rankstat {

namespace {
// SGLang refreshes an idle rank's stats after 30 s without a batch and reports gen_throughput 0.
constexpr std::uint64_t kGenThroughputStaleNs = 30'000'000'000ull;
// A temporary older than this whose creator is gone was abandoned mid-creation.
constexpr std::int64_t kTemporaryMaxAgeSeconds = 60;

std::uint64_t to_ns(std::chrono::milliseconds d) {
  return static_cast<std::uint64_t>(d.count()) * 1'000'000ull;
}

std::int64_t ctime_ns(const struct stat& st) {
  return static_cast<std::int64_t>(st.st_ctim.tv_sec) * 1'000'000'000 + st.st_ctim.tv_nsec;
}

bool expired(const RankSegment& s, std::uint64_t now_ns, std::uint64_t grace_ns) {
  return !is_live(s.state()) && now_ns >= s.state_since_ns() && now_ns - s.state_since_ns() > grace_ns;
}
}  // namespace

SegmentRegistry::SegmentRegistry(RegistryOptions options, RetiredTotals& retired)
    : options_(std::move(options)), retired_(retired) {
  shm::install_bus_guard();
  for (const shm::ScalarField& field : shm::kSchedulerScalarFields) {
    shm::GaugeMode mode = shm::GaugeMode::kMostRecent;
    if (snapshot_field_gauge_mode(field, mode))
      schema_[snapshot_family_name(field)] = {shm::SeriesKind::kGauge, mode};
  }
}

void SegmentRegistry::set_trust(std::vector<std::uint32_t> allowed_uids, bool any_owner,
                                bool allow_world_writable) {
  options_.allowed_uids = std::move(allowed_uids);
  options_.any_owner = any_owner;
  options_.allow_world_writable = allow_world_writable;
  for (auto& [name, r] : rejected_) r.recheck = true;
}

bool SegmentRegistry::Rejected::same_file(const struct stat& st) const {
  return inode == st.st_ino && device == st.st_dev && mode == st.st_mode && uid == st.st_uid &&
         gid == st.st_gid && size == st.st_size && ctime_ns == rankstat::ctime_ns(st);
}

std::string SegmentRegistry::distrust(const struct stat& st, std::string& message) const {
  if (!S_ISREG(st.st_mode)) {
    message = "not a regular file (a symlink, directory, FIFO or device); never opened";
    return "not_regular_file";
  }
  if ((st.st_mode & S_IWOTH) != 0 && !options_.allow_world_writable) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
    message =
        std::string("mode ") + mode +
        " lets any local user write it; writers create segments 0660 or 0640 (--shm.allow-world-writable "
        "accepts it anyway)";
    return "world_writable";
  }
  const std::uint32_t uid = st.st_uid;
  const bool owner_ok = options_.any_owner || uid == geteuid() || uid == 0 ||
                        std::find(options_.allowed_uids.begin(), options_.allowed_uids.end(), uid) !=
                            options_.allowed_uids.end();
  if (!owner_ok) {
    message = "owned by uid " + std::to_string(uid) + ", which is neither this daemon's uid " +
              std::to_string(geteuid()) + ", root, nor in --shm.allowed-uids";
    return "unexpected_owner";
  }
  return {};
}

void SegmentRegistry::reject(const std::string& name, const struct stat& st, const std::string& reason,
                             const std::string& message, std::uint64_t now_ns) {
  Rejected& r = rejected_[name];
  const bool repeat = r.inode == st.st_ino && r.device == st.st_dev && r.reason == reason;
  r = Rejected{st.st_ino, st.st_dev, st.st_mode, st.st_uid, st.st_gid, st.st_size, ctime_ns(st), reason};
  if (repeat) return;  // counted and logged for this file and reason already
  if (reason == "not_regular_file") {
    ++counters_.rejected_not_regular;
  } else if (reason == "world_writable") {
    ++counters_.rejected_world_writable;
  } else if (reason == "unexpected_owner") {
    ++counters_.rejected_unexpected_owner;
  } else if (reason == "bus_error") {
    ++counters_.quarantined_bus_error;
  } else {
    for (int i = 0; i < shm::kRejectReasonCount; ++i) {
      if (shm::reject_reason_name(static_cast<shm::RejectReason>(i)) == reason) {
        ++counters_.rejected_by_reason[static_cast<std::size_t>(i)];
      }
    }
  }
  if (!log_limiter_.allow(now_ns)) {
    ++counters_.log_lines_suppressed;
    return;
  }
  const std::uint64_t suppressed = log_limiter_.suppressed_since_last();
  if (suppressed != 0) spdlog::warn("{} similar messages about bad segments were suppressed", suppressed);
  spdlog::warn("rejected segment {} ({}): {}", name, reason, message);
}

void SegmentRegistry::note_faults(const RankSegment& s, std::uint64_t now_ns) {
  std::string reason;
  if (s.take_unreported_memory_fault()) {
    reason = std::string(s.memory_fault());
    ++(reason == "truncated" ? counters_.quarantined_truncated : counters_.quarantined_bus_error);
  } else if (s.take_unreported_ring_fault()) {
    reason = std::string(s.ring_fault());
    ++counters_.corrupt_rings;
    ++(reason == "ring_index" ? counters_.quarantined_ring_index : counters_.quarantined_ring_record);
  } else {
    return;
  }
  if (!log_limiter_.allow(now_ns)) {
    ++counters_.log_lines_suppressed;
    return;
  }
  const std::uint64_t suppressed = log_limiter_.suppressed_since_last();
  if (suppressed != 0) spdlog::warn("{} similar messages about bad segments were suppressed", suppressed);
  if (reason == "truncated" || reason == "bus_error") {
    spdlog::error(
        "segment {} (pid {}) quarantined ({}): its file shrank below its mapping; last good values "
        "kept, its memory is no longer read",
        s.name(), s.identity().pid, reason);
  } else {
    spdlog::error(
        "segment {} (pid {}) quarantined ({}): ring indices or record lengths are inconsistent; last good "
        "values kept, ring no longer read",
        s.name(), s.identity().pid, reason);
  }
}

bool SegmentRegistry::wanted(const std::string& instance) const {
  return options_.instances.empty() || std::find(options_.instances.begin(), options_.instances.end(),
                                                 instance) != options_.instances.end();
}

int SegmentRegistry::scan(std::uint64_t now_ns) {
  ++counters_.scans;
  DIR* dir = opendir(options_.directory.c_str());
  if (dir == nullptr) {
    spdlog::warn("cannot list shm directory {}: {}", options_.directory, shm::errno_text(errno));
    return 0;
  }
  std::vector<std::string> names;
  std::vector<std::string> temporaries;
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
  std::set<RetiredTotals::GenerationKey> present;
  for (const std::string& name : names) {
    const std::string path = options_.directory + "/" + name;
    struct stat st {};
    if (lstat(path.c_str(), &st) != 0) continue;
    auto it = tracked_.find(name);
    if (it != tracked_.end()) {
      const Tracked& t = it->second;
      if (t.current && t.current->inode() == st.st_ino && t.current->device() == st.st_dev) {
        present.insert({name, t.current->identity().generation});
        continue;  // same generation
      }
      if (!t.current && t.retired_inode == st.st_ino) continue;  // retired, file kept
    }
    auto rejected = rejected_.find(name);
    if (rejected != rejected_.end() && !rejected->second.recheck && rejected->second.same_file(st)) {
      continue;  // unchanged since it was refused
    }
    open_generation(name, st, now_ns);
    auto now_it = tracked_.find(name);
    if (now_it != tracked_.end() && now_it->second.current && now_it->second.current->inode() == st.st_ino) {
      ++opened;
      present.insert({name, now_it->second.current->identity().generation});
    }
  }
  if (!pruned_retired_generations_) {
    // Retired generations are remembered only while their file might still be found; after the first
    // scan, forget those whose file is gone, so the store does not grow with every restart.
    present.insert(retired_skipped_.begin(), retired_skipped_.end());
    retired_.forget_generations_except(present);
    pruned_retired_generations_ = true;
  }
  return opened;
}

void SegmentRegistry::sweep_temporary(const std::string& name, std::uint64_t) {
  const auto pid = shm::parse_temporary_pid(name);
  if (!pid) return;
  const std::string path = options_.directory + "/" + name;
  struct stat st {};
  if (lstat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return;
  const std::int64_t age = static_cast<std::int64_t>(shm::realtime_ns() / 1'000'000'000ull) - st.st_mtime;
  if (age < kTemporaryMaxAgeSeconds || shm::process_start_ticks(*pid)) return;
  if (::unlink(path.c_str()) == 0) {
    ++counters_.temporaries_swept;
    spdlog::info("removed {}: left behind by pid {}, which died while creating it", name, *pid);
  }
}

void SegmentRegistry::open_generation(const std::string& name, const struct stat& listed,
                                      std::uint64_t now_ns) {
  const std::string path = options_.directory + "/" + name;
  std::string message;
  // Judged on lstat before anything is opened or mapped (a symlink is never followed), then again on the
  // descriptor actually opened, so a file swapped in between is caught too.
  if (std::string reason = distrust(listed, message); !reason.empty()) {
    reject(name, listed, reason, message, now_ns);
    return;
  }
  shm::OpenedSegment opened;
  // The file may be truncated between open_segment's fstat and its reads of the header.
  const bool faulted =
      !shm::run_bus_guarded(nullptr, 0, [&] { opened = shm::open_segment(path, /*consumer=*/true); });
  if (faulted) {
    opened.file.reset();
    reject(name, listed, "bus_error", "the file shrank while its header was being read", now_ns);
    return;
  }
  if (opened.reason == shm::RejectReason::kNotReady) return;  // a writer mid-creation: next scan
  if (opened.reason != shm::RejectReason::kNone) {
    struct stat st {};
    reject(name, lstat(path.c_str(), &st) == 0 ? st : listed,
           std::string(shm::reject_reason_name(opened.reason)), opened.message, now_ns);
    return;
  }
  struct stat held {};
  if (fstat(opened.file.fd(), &held) != 0) return;
  if (std::string reason = distrust(held, message); !reason.empty()) {
    reject(name, held, reason, message, now_ns);
    return;
  }
  rejected_.erase(name);
  const RetiredTotals::GenerationKey key{name, opened.identity.generation};
  if (retired_.holds(key)) {
    // Folded into the retired totals before a daemon restart: counting it again would double it.
    Tracked& t = tracked_[name];
    if (t.current) t.previous.push_back(std::move(t.current));
    t.retired_inode = opened.inode;
    retired_skipped_.insert(key);
    if (retired_.persistent() && shm::unlink_if_same_file(opened.file.fd(), path))
      ++counters_.segments_unlinked;
    return;
  }
  const std::uint32_t pid = opened.identity.pid;
  const std::uint64_t start_ticks = opened.identity.pid_start_ticks;
  auto segment = std::make_unique<RankSegment>(name, path, std::move(opened), now_ns);
  Tracked& t = tracked_[name];
  if (t.current) {
    // A restarted rank renamed a new generation onto the name: drain what the old one still holds and
    // keep it (its totals stay in the sums until it is retired).
    t.current->drain(now_ns);
    t.current->refresh_cumulative();
    ++counters_.generations_replaced;
    spdlog::info("segment {} replaced by a new generation (pid {} -> {})", name, t.current->identity().pid,
                 pid);
    t.previous.push_back(std::move(t.current));
  } else {
    spdlog::info("attached segment {} (pid {})", name, pid);
  }
  // A writer whose pid we cannot see lives in another pid namespace: judge it by its heartbeat.
  t.pid_visible = start_ticks != 0 && shm::process_start_ticks(pid).has_value();
  if (!t.pid_visible && start_ticks != 0 && segment->producer().closed) t.pid_visible = true;
  t.retired_inode = 0;
  segment->refresh_cumulative();
  note_faults(*segment, now_ns);
  check_schema(*segment);
  t.current = std::move(segment);
}

void SegmentRegistry::check_schema(RankSegment& segment) {
  if (segment.schema_conflict()) return;
  for (const SeriesState& s : segment.series()) {
    const std::pair<shm::SeriesKind, shm::GaugeMode> mine{
        s.info.kind, s.info.kind == shm::SeriesKind::kGauge ? s.info.gauge_mode : shm::GaugeMode::kSum};
    auto [it, inserted] = schema_.try_emplace(s.info.family, mine);
    if (inserted || it->second == mine) continue;
    segment.mark_schema_conflict();
    ++counters_.schema_conflicts;
    spdlog::error(
        "segment {} rejected: family {} is a {} (mode {}) here but a {} (mode {}) in other ranks; fix "
        "the engine so every rank declares it the same way",
        segment.name(), s.info.family, static_cast<int>(mine.first), static_cast<int>(mine.second),
        static_cast<int>(it->second.first), static_cast<int>(it->second.second));
    return;
  }
}

DrainPass SegmentRegistry::drain_all(std::uint64_t now_ns) {
  DrainPass pass;
  auto drain_one = [&](RankSegment& s, const std::string&) {
    const std::uint64_t before = s.records_drained();
    if (!s.drain(now_ns)) {
      note_faults(s, now_ns);
      return;
    }
    pass.records += s.records_drained() - before;
    pass.fullest_fill = std::max(pass.fullest_fill, s.last_drain_fill());
    pass.drops = pass.drops || s.dropped_before_last_drain();
  };
  for (auto& [name, t] : tracked_) {
    if (t.current && is_live(t.current->state())) drain_one(*t.current, name);
    for (auto& p : t.previous) {
      if (is_live(p->state())) drain_one(*p, name);
    }
  }
  return pass;
}

RankState evaluate_liveness(const RankSegment& segment, bool pid_visible, std::uint64_t now_ns,
                            std::chrono::milliseconds stall_after) {
  const RankState previous = segment.state();
  if (previous == RankState::kDead || previous == RankState::kClosed) return previous;  // terminal
  const shm::ProducerState p = segment.producer();
  if (p.closed) return RankState::kClosed;
  const shm::SegmentHeader& h = segment.identity();
  // A verified pidfd would already have reported an exit (or a reuse, which needs an exit first).
  if (pid_visible && !segment.exit_watched()) {
    const auto ticks = shm::process_start_ticks(h.pid);
    if (!ticks || *ticks != h.pid_start_ticks) return RankState::kDead;  // gone, or the pid was reused
  }
  if (now_ns > p.heartbeat_ns && now_ns - p.heartbeat_ns > to_ns(stall_after)) return RankState::kStalled;
  return RankState::kLive;
}

int SegmentRegistry::check_liveness(std::uint64_t now_ns, std::chrono::milliseconds stall_after) {
  int changed = 0;
  auto check_one = [&](RankSegment& s, bool pid_visible, const std::string& name) {
    // One fstat per generation and pass: a file shrunk below its mapping is quarantined before any read
    // can fault on it (the bus guard covers the window in between).
    s.check_file_size();
    note_faults(s, now_ns);
    const RankState before = s.state();
    const RankState after = evaluate_liveness(s, pid_visible, now_ns, stall_after);
    s.apply_staleness(now_ns, kGenThroughputStaleNs);
    s.update_rate(now_ns);
    if (after == before) return;
    if (!is_live(after)) {
      s.drain(now_ns);  // whatever the rank committed before it went away
      s.refresh_cumulative();
      note_faults(s, now_ns);
    }
    s.set_state(after, now_ns);
    ++changed;
    spdlog::info("segment {} (pid {}): {} -> {}", name, s.identity().pid, rank_state_name(before),
                 rank_state_name(after));
  };
  for (auto& [name, t] : tracked_) {
    if (t.current) check_one(*t.current, t.pid_visible, name);
    for (auto& p : t.previous) check_one(*p, true, name);
  }
  return changed;
}

bool SegmentRegistry::retire(RankSegment& s) {
  s.refresh_cumulative();
  const RetiredTotals::GenerationKey key{s.name(), s.identity().generation};
  if (!s.schema_conflict()) {
    // The same series as the exposition takes from a live generation (collect_engine_metrics).
    const bool engine_rule_passed = exports_engine_metrics(s.identity());
    const Labels base = identity_labels(s.identity(), options_.instance_label);
    for (const SeriesState& series : s.series()) {
      const bool declared = (series.info.flags & shm::kSeriesWithoutIdentityLabels) != 0;
      if (!declared && !engine_rule_passed) continue;
      if (series.info.kind == shm::SeriesKind::kCounter) {
        retired_.add_counter(key, series.info.family, series_labels(base, series), series.value.value,
                             series.info.help);
      } else if (series.info.kind == shm::SeriesKind::kHistogram ||
                 series.info.kind == shm::SeriesKind::kSummary) {
        retired_.add_histogram(key, series.info.family, series_labels(base, series), series.info.bounds,
                               series.value.counts, series.value.sum, series.info.help,
                               series.info.kind == shm::SeriesKind::kSummary);
      }
    }
  }
  retired_.mark_retired(key);
  ++counters_.generations_retired;
  std::string error;
  if (!retired_.save(error)) {
    spdlog::error("retired totals not persisted, keeping segment {} on disk: {}", s.name(), error);
    return false;
  }
  if (retired_.persistent() && shm::unlink_if_same_file(s.fd(), s.path())) {
    ++counters_.segments_unlinked;
    spdlog::info("retired segment {} (pid {}) and removed it", s.name(), s.identity().pid);
    return true;
  }
  spdlog::info("retired segment {} (pid {})", s.name(), s.identity().pid);
  return false;
}

int SegmentRegistry::retire_expired(std::uint64_t now_ns) {
  const std::uint64_t grace_ns = to_ns(options_.dead_grace);
  int retired = 0;
  for (auto& [name, t] : tracked_) {
    for (auto it = t.previous.begin(); it != t.previous.end();) {
      if (!expired(**it, now_ns, grace_ns)) {
        ++it;
        continue;
      }
      retire(**it);
      ++retired;
      it = t.previous.erase(it);
    }
    if (t.current && expired(*t.current, now_ns, grace_ns)) {
      const bool unlinked = retire(*t.current);
      t.retired_inode = unlinked ? 0 : t.current->inode();
      retired_skipped_.insert({name, t.current->identity().generation});
      t.current.reset();
      ++retired;
    }
  }
  return retired;
}

void SegmentRegistry::refresh_cumulative() {
  for (auto& [name, t] : tracked_) {
    auto refresh = [this](RankSegment& s) {
      if (!is_live(s.state())) return;  // final values were read when it died
      s.refresh_cumulative();
      note_faults(s, shm::monotonic_ns());
      check_schema(s);
    };
    if (t.current) refresh(*t.current);
    for (auto& p : t.previous) refresh(*p);
  }
}

std::vector<const RankSegment*> SegmentRegistry::generations() const {
  std::vector<const RankSegment*> out = current();
  for (const auto& [name, t] : tracked_) {
    for (const auto& p : t.previous) out.push_back(p.get());
  }
  return out;
}

std::vector<const RankSegment*> SegmentRegistry::current() const {
  std::vector<const RankSegment*> out;
  out.reserve(tracked_.size());
  for (const auto& [name, t] : tracked_) {
    if (t.current) out.push_back(t.current.get());
  }
  return out;
}

std::vector<const RankSegment*> SegmentRegistry::pid_watchable() const {
  std::vector<const RankSegment*> out;
  for (const auto& [name, t] : tracked_) {
    if (t.current && t.pid_visible && is_live(t.current->state())) out.push_back(t.current.get());
  }
  return out;
}

void SegmentRegistry::set_exit_watched(const std::string& name, std::uint64_t generation, bool watched) {
  auto it = tracked_.find(name);
  if (it == tracked_.end()) return;
  if (it->second.current && it->second.current->identity().generation == generation) {
    it->second.current->set_exit_watched(watched);
  }
  for (auto& p : it->second.previous) {
    if (p->identity().generation == generation) p->set_exit_watched(watched);
  }
}

bool SegmentRegistry::heartbeat_only(const RankSegment& segment) const {
  auto it = tracked_.find(segment.name());
  return it != tracked_.end() && it->second.current.get() == &segment && !it->second.pid_visible;
}

const RankSegment* SegmentRegistry::find_current(const std::string& id) const {
  auto it = tracked_.find(std::string(shm::kSegmentPrefix) + id);
  return it == tracked_.end() ? nullptr : it->second.current.get();
}

}  // namespace rankstat
