#include "segment_registry.hpp"

#include <dirent.h>
#include <spdlog/spdlog.h>
#include <sys/resource.h>
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
  fd_budget_ = options_.fd_budget;
  if (fd_budget_ == 0) {
    rlimit limit{};
    const std::uint64_t soft = getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY
                                   ? static_cast<std::uint64_t>(limit.rlim_cur)
                                   : 1u << 20;
    // Keep a quarter (16 to 256) for the listener, HTTP connections, /proc reads and the state file.
    const std::uint64_t reserve = std::clamp<std::uint64_t>(soft / 4, 16, 256);
    fd_budget_ = soft > reserve ? soft - reserve : 0;
  }
}

void SegmentRegistry::set_trust(std::vector<std::uint32_t> allowed_uids, bool any_owner,
                                bool allow_world_writable,
                                std::map<std::string, std::vector<std::uint32_t>> instance_owners) {
  options_.trust.allowed_uids = std::move(allowed_uids);
  options_.trust.any_owner = any_owner;
  options_.trust.allow_world_writable = allow_world_writable;
  options_.trust.instance_owners = std::move(instance_owners);
  for (auto& [name, r] : rejected_) r.recheck = true;
}

bool SegmentRegistry::Rejected::same_file(const struct stat& st) const {
  return inode == st.st_ino && device == st.st_dev && mode == st.st_mode && uid == st.st_uid &&
         gid == st.st_gid && size == st.st_size && ctime_ns == rankstat::ctime_ns(st);
}

namespace {

// As logged; spelt as the reason label of rankstat_segments_rejected_total.
std::string_view rejection_name(Rejection rejection) {
  switch (rejection.kind) {
    case Rejection::Kind::kUntrusted:
      return shm::trust_refusal_name(rejection.untrusted);
    case Rejection::Kind::kHardLink:
      return "hard_link";
    case Rejection::Kind::kBusError:
      return "bus_error";
    case Rejection::Kind::kInvalid:
      break;
  }
  return shm::reject_reason_name(rejection.invalid);
}

}  // namespace

std::optional<shm::TrustRefusal> SegmentRegistry::distrust(const struct stat& st, const std::string& instance,
                                                           std::string& message) const {
  // The rule is shmproto's (trust.hpp), the one `rankstat --direct` applies too.
  return options_.trust.judge_file(st, instance, message);
}

void SegmentRegistry::reject(const std::string& name, const struct stat& st, Rejection reason,
                             const std::string& message, std::uint64_t now_ns) {
  Rejected& r = rejected_[name];
  const bool repeat = r.inode == st.st_ino && r.device == st.st_dev && r.reason == reason;
  r = Rejected{st.st_ino, st.st_dev, st.st_mode, st.st_uid, st.st_gid, st.st_size, ctime_ns(st), reason};
  if (repeat) return;  // counted and logged for this file and reason already
  switch (reason.kind) {
    case Rejection::Kind::kUntrusted:
      ++counters_.rejected_untrusted[static_cast<std::size_t>(reason.untrusted)];
      break;
    case Rejection::Kind::kHardLink:
      ++counters_.rejected_hard_link;
      break;
    case Rejection::Kind::kBusError:
      ++counters_.quarantined_bus_error;
      break;
    case Rejection::Kind::kInvalid:
      ++counters_.rejected_by_reason[static_cast<std::size_t>(reason.invalid)];
      break;
  }
  if (!log_limiter_.allow(now_ns)) {
    ++counters_.log_lines_suppressed;
    return;
  }
  const std::uint64_t suppressed = log_limiter_.suppressed_since_last();
  if (suppressed != 0) spdlog::warn("{} similar messages about bad segments were suppressed", suppressed);
  spdlog::warn("rejected segment {} ({}): {}", name, rejection_name(reason), message);
}

void SegmentRegistry::note_faults(const RankSegment& s, std::uint64_t now_ns) {
  SegmentFault fault = SegmentFault::kNone;
  if (s.take_unreported_memory_fault()) {
    fault = s.memory_fault();
  } else if (s.take_unreported_ring_fault()) {
    fault = s.ring_fault();
    ++counters_.corrupt_rings;
  } else {
    return;
  }
  const bool memory = fault == SegmentFault::kTruncated || fault == SegmentFault::kBusError;
  switch (fault) {
    case SegmentFault::kTruncated:
      ++counters_.quarantined_truncated;
      break;
    case SegmentFault::kBusError:
      ++counters_.quarantined_bus_error;
      break;
    case SegmentFault::kRingIndex:
      ++counters_.quarantined_ring_index;
      break;
    case SegmentFault::kNone:
    case SegmentFault::kRingRecord:
      ++counters_.quarantined_ring_record;
      break;
  }
  if (!log_limiter_.allow(now_ns)) {
    ++counters_.log_lines_suppressed;
    return;
  }
  const std::uint64_t suppressed = log_limiter_.suppressed_since_last();
  if (suppressed != 0) spdlog::warn("{} similar messages about bad segments were suppressed", suppressed);
  if (memory) {
    spdlog::error(
        "segment {} (pid {}) quarantined ({}): its file shrank below its mapping; last good values "
        "kept, its memory is no longer read",
        s.name(), s.identity().pid, segment_fault_name(fault));
  } else {
    spdlog::error(
        "segment {} (pid {}) quarantined ({}): ring indices or record lengths are inconsistent; last good "
        "values kept, ring no longer read",
        s.name(), s.identity().pid, segment_fault_name(fault));
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

bool SegmentRegistry::generation_gone(const RetiredTotals::GenerationKey& key) const {
  struct stat st {};
  if (::lstat((options_.directory + "/" + key.first).c_str(), &st) != 0) return errno == ENOENT;
  auto it = tracked_.find(key.first);
  if (it == tracked_.end()) return false;  // present but not opened (refused, being created, over budget)
  const Tracked& t = it->second;
  if (t.current && t.current->inode() == st.st_ino && t.current->device() == st.st_dev)
    return t.current->identity().generation != key.second;
  // The name holds a retired generation's file: another generation (the key is not retired).
  return !t.current && t.retired_inode == st.st_ino && t.retired_device == st.st_dev;
}

void SegmentRegistry::resolve_checkpoints() {
  bool recovered = false;
  for (const RetiredTotals::GenerationKey& key : retired_.checkpoints().unclaimed_totals()) {
    if (retired_.holds(key)) continue;  // dropped below once persisted
    const auto parsed = shm::parse_segment_name(key.first);
    if (retired_.holds_nonce(key.second) || !parsed || !wanted(parsed->instance)) {
      retired_.checkpoints().drop(key);  // retired under another name, or not this daemon's to serve
      continue;
    }
    if (!generation_gone(key)) continue;  // its file may still be opened: never counted twice
    // Its successor was renamed over it, or its file removed, while no daemon ran: what the previous
    // daemon last saw of it (at least what Prometheus read) joins the retired totals.
    retired_.fold_unclaimed(key);
    FamilyDeclarations::note_replaced(retired_);
    ++counters_.generations_recovered;
    recovered = true;
    spdlog::info(
        "segment {}: generation {:016x} ended while no daemon ran; its checkpointed totals are retired",
        key.first, key.second);
  }
  if (recovered) persist_retired();
  for (const RetiredTotals::GenerationKey& key : retired_.checkpoints().unclaimed_totals()) {
    if (retired_.persisted(key)) retired_.checkpoints().drop(key);
  }
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

void SegmentRegistry::note_resource_error(int error, const std::string& what, std::uint64_t now_ns) {
  if (error == EMFILE || error == ENFILE) ++counters_.fd_exhaustion;
  if (!log_limiter_.allow(now_ns)) {
    ++counters_.log_lines_suppressed;
    return;
  }
  spdlog::warn("{}: {}; not a verdict on the rank, retried later (raise LimitNOFILE / ulimit -n)", what,
               shm::errno_text(error));
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

void SegmentRegistry::resolve_declarations(RankSegment* pending) {
  std::vector<RankSegment*> held;
  for (auto& [name, t] : tracked_) {
    if (t.current) held.push_back(t.current.get());
    for (auto& p : t.previous) held.push_back(p.get());
  }
  if (pending != nullptr && std::find(held.begin(), held.end(), pending) == held.end())
    held.push_back(pending);
  declarations_.resolve(held, retired_);
  counters_.family_conflicts = declarations_.conflicts();
  counters_.family_conflict_series = declarations_.conflict_series();
}

DrainPass SegmentRegistry::drain_all(std::uint64_t now_ns) {
  DrainPass pass;
  auto drain_one = [&](RankSegment& s, const std::string&) {
    const std::uint64_t before = s.drained().records;
    if (!drain_counted(s, now_ns)) {
      note_faults(s, now_ns);
      return;
    }
    pass.records += s.drained().records - before;
    pass.fullest_fill = std::max(pass.fullest_fill, s.drained().last_fill);
    pass.drops = pass.drops || s.drained().dropped_before_last;
  };
  for (auto& [name, t] : tracked_) {
    if (t.current && is_live(t.current->state())) drain_one(*t.current, name);
    for (auto& p : t.previous) {
      if (is_live(p->state())) drain_one(*p, name);
    }
  }
  return pass;
}

bool SegmentRegistry::drain_counted(RankSegment& s, std::uint64_t now_ns) {
  const std::uint64_t before = s.drained().records;
  const bool ok = s.drain(now_ns);
  counters_.records_drained += s.drained().records - before;
  return ok;
}

void SegmentRegistry::carry_ring_totals(Tracked& t, const RankSegment& s) {
  const shm::ProducerState p = s.producer();
  t.carried.records += p.records_written;
  t.carried.dropped += p.dropped_records;
  t.carried.sequence_gaps += s.drained().sequence_gaps;
  t.carried.malformed += s.drained().malformed;
}

RingTotals SegmentRegistry::ring_totals(const RankSegment& s) const {
  RingTotals out;
  if (auto it = tracked_.find(s.name()); it != tracked_.end()) out = it->second.carried;
  const shm::ProducerState p = s.producer();
  out.records += p.records_written;
  out.dropped += p.dropped_records;
  out.sequence_gaps += s.drained().sequence_gaps;
  out.malformed += s.drained().malformed;
  return out;
}

RankState evaluate_liveness(const RankSegment& segment, bool pid_visible, std::uint64_t now_ns,
                            std::chrono::milliseconds stall_after, int* check_error) {
  if (check_error != nullptr) *check_error = 0;
  const RankState previous = segment.state();
  std::optional<shm::ProcessStart> probe;
  // A verified pidfd would already have reported an exit (or a reuse, which needs an exit first).
  if (pid_visible && !segment.exit_watched() && !shm::is_final(previous)) {
    probe = shm::probe_process_start(segment.identity().pid);
    if (probe->status == shm::ProcessStart::Status::kUnknown && check_error != nullptr) {
      // Unknown is not dead: EMFILE, EACCES or a torn read say nothing about the process.
      *check_error = probe->error != 0 ? probe->error : -1;
    }
  }
  return shm::judge_liveness(segment.identity(), segment.producer(), probe, previous, now_ns,
                             to_ns(stall_after));
}

int SegmentRegistry::check_liveness(std::uint64_t now_ns, std::chrono::milliseconds stall_after) {
  int changed = 0;
  auto check_one = [&](RankSegment& s, bool pid_visible, const std::string& name) {
    // One fstat per generation and pass: a file shrunk below its mapping is quarantined before any read
    // can fault on it (the bus guard covers the window in between).
    s.check_file_size();
    note_faults(s, now_ns);
    const RankState before = s.state();
    int check_error = 0;
    const RankState after = evaluate_liveness(s, pid_visible, now_ns, stall_after, &check_error);
    if (check_error != 0) {
      ++counters_.liveness_unknown;
      if (check_error > 0)
        note_resource_error(check_error, "cannot check pid " + std::to_string(s.identity().pid), now_ns);
    }
    s.apply_staleness(now_ns, shm::kGenThroughputStaleNs);
    s.update_rate(now_ns);
    if (after == before) return;
    if (!is_live(after)) {
      drain_counted(s, now_ns);  // whatever the rank committed before it went away
      s.refresh_cumulative();
      note_faults(s, now_ns);
    }
    s.set_state(after, now_ns);
    if (!is_live(after)) fold(s, now_ns);
    ++changed;
    spdlog::info("segment {} (pid {}): {} -> {}", name, s.identity().pid, rank_state_name(before),
                 rank_state_name(after));
  };
  for (auto& [name, t] : tracked_) {
    if (t.current) check_one(*t.current, t.pid_visible, name);
    for (auto& p : t.previous) check_one(*p, true, name);
  }
  persist_retired();
  return changed;
}

void SegmentRegistry::fold(RankSegment& s, std::uint64_t now_ns) {
  if (s.folded()) return;
  // Integrals are counters like the others: folded the same way, so they never go backwards. A DEAD or
  // CLOSED generation's integrals stopped at its writer's last sign of life.
  s.settle_integrals(now_ns);
  // Only the series the scrape serves move: a family whose declaration lost stays out of the totals too.
  resolve_declarations(&s);
  retired_.fold(s, options_.instance_label);
  FamilyDeclarations::note_replaced(retired_);
  s.mark_folded();
  ++counters_.generations_folded;
}

bool SegmentRegistry::persist_retired() {
  if (!retired_.unsaved()) return true;
  std::string error;
  if (retired_.save(error)) {
    persist_failure_logged_ = false;
    return true;
  }
  if (!persist_failure_logged_) {
    persist_failure_logged_ = true;
    spdlog::error(
        "retired totals not persisted (retried on every liveness pass; their segments stay on disk): {}",
        error);
  }
  return false;
}

bool SegmentRegistry::retire(RankSegment& s) {
  fold(s, shm::monotonic_ns());  // folded already when it died: nothing is added twice
  ++counters_.generations_retired;
  retired_series_over_limit_ += s.series_over_limit();
  retired_series_invalid_ += s.invalid_series();
  retired_refused_.no_space += s.refused_registrations().no_space;
  retired_refused_.full += s.refused_registrations().full;
  retired_refused_.other += s.refused_registrations().other;
  if (!persist_retired()) return false;  // the file stays for a restarted daemon to count
  if (s.state() == RankState::kDead && s.producer().heartbeat_ns > s.heartbeat_at_state_change()) {
    // Written after its writer was judged gone: a writer in another pid namespace, whose pid means
    // nothing here. Its file stays (unlinking it would cut a live engine off).
    spdlog::warn(
        "segment {} (pid {}) was written after its writer was judged DEAD (another pid namespace?); "
        "retired but not removed",
        s.name(), s.identity().pid);
    return false;
  }
  // Its totals are in the retired totals now (saved, with --state.dir): the file goes, with or without a
  // state dir, so dead processes do not fill the shm directory. Without --state.dir a daemon restart
  // loses what the retired totals held (docs/reliability.md).
  if (shm::unlink_if_same_file(s.fd(), s.path())) {
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
  persist_retired();  // a save that failed earlier
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
      carry_ring_totals(t, *t.current);
      t.retired_inode = unlinked ? 0 : t.current->inode();
      t.retired_device = unlinked ? 0 : t.current->device();
      retired_skipped_.insert({name, t.current->identity().generation});
      t.current.reset();
      ++retired;
    }
  }
  return retired;
}

void SegmentRegistry::settle_integrals(std::uint64_t now_ns) {
  if (!options_.integrals.enabled()) return;
  for (auto& [name, t] : tracked_) {
    if (t.current) t.current->settle_integrals(now_ns);
    for (auto& p : t.previous) p->settle_integrals(now_ns);
  }
}

bool SegmentRegistry::save_checkpoints(std::string& error) {
  checkpoint_due_ = false;
  if (!retired_.persistent()) return true;
  resolve_declarations();  // a checkpoint keeps what the scrape serves
  // Called before every scrape is answered: what a scrape serves of a held generation (its totals and
  // integrals) must be on disk first, so that a daemon killed right after the answer, restarted, and
  // finding the generation gone, serves at least as much (counters never go backwards). The checkpoint
  // is therefore never skipped because of time, only when it would say nothing new: each generation's
  // entry is brought up to date in place, and the file is written only if some entry moved, a generation
  // came or went (or its totals reached the retired totals on disk), or the loaded checkpoints changed.
  // When nothing moved, the file written last (successfully) already holds every value this scrape
  // serves, which is what the guarantee needs. A failed write leaves checkpoint_current_ false: the next
  // call writes again whatever changed.
  bool changed = !checkpoint_current_;
  std::map<RetiredTotals::GenerationKey, HeldCheckpoint> held;
  for (const RankSegment* s : generations()) {
    const RetiredTotals::GenerationKey key{s->name(), s->identity().generation};
    auto node = checkpoints_.extract(key);
    if (node.empty()) changed = true;
    HeldCheckpoint& entry = node.empty() ? held[key] : held.insert(std::move(node)).position->second;
    RetiredTotals::LiveCheckpoint& checkpoint = entry.checkpoint;
    for (const IntegratedGauge& g : s->integrated()) {
      if (!g.track.has_value()) continue;
      const IntegralCheckpoint now{g.track.integral(), g.track.value(), g.track.integrated_until_ns()};
      auto [it, inserted] = checkpoint.integrals.try_emplace(g.checkpoint_key, now);
      if (!inserted && it->second.integral == now.integral && it->second.value == now.value &&
          it->second.until_ns == now.until_ns)
        continue;
      it->second = now;
      changed = true;
    }
    // Until the retired totals on disk hold it, a generation's totals are kept here: a restarted daemon
    // that no longer finds its file retires these.
    if (retired_.persisted(key)) {
      if (checkpoint.totals.has_value()) {
        checkpoint.totals.reset();
        changed = true;
      }
    } else if (!checkpoint.totals.has_value() || entry.resolution != declarations_.version() ||
               !refresh_cumulative_totals(*s, *checkpoint.totals, changed)) {
      checkpoint.totals = cumulative_totals(*s, options_.instance_label, &entry.labels);
      entry.resolution = declarations_.version();
      changed = true;
    }
  }
  if (!checkpoints_.empty()) changed = true;  // generations no longer held
  checkpoints_ = std::move(held);
  const bool drop_unclaimed = scanned_once();
  if (retired_.checkpoints().unclaimed() != checkpoint_unclaimed_ ||
      drop_unclaimed != checkpoint_dropped_unclaimed_)
    changed = true;
  if (!changed) return true;
  std::map<RetiredTotals::GenerationKey, const RetiredTotals::LiveCheckpoint*> live;
  for (const auto& [key, entry] : checkpoints_) live.emplace(key, &entry.checkpoint);
  checkpoint_current_ = retired_.checkpoints().save_live(live, drop_unclaimed, error);
  checkpoint_unclaimed_ = retired_.checkpoints().unclaimed();
  checkpoint_dropped_unclaimed_ = drop_unclaimed;
  return checkpoint_current_;
}

void SegmentRegistry::refresh_cumulative() {
  std::uint64_t over_limit = retired_series_over_limit_;
  std::uint64_t invalid = retired_series_invalid_;
  shm::CumulativeReader::Refused refused = retired_refused_;
  for (auto& [name, t] : tracked_) {
    auto refresh = [&](RankSegment& s) {
      if (is_live(s.state())) {  // else the final values were read when it died
        const std::uint64_t before = s.series_over_limit();
        const std::uint64_t invalid_before = s.invalid_series();
        s.refresh_cumulative();
        note_faults(s, shm::monotonic_ns());
        if (before == 0 && s.series_over_limit() != 0) {
          spdlog::warn(
              "segment {} (pid {}) declares more than {} series (--shm.max-series-per-segment); the "
              "rest are dropped and counted",
              s.name(), s.identity().pid, options_.max_series_per_segment);
        }
        if (invalid_before == 0 && s.invalid_series() != 0) {
          spdlog::warn(
              "segment {} (pid {}) holds series descriptors that fail validation (kind, name, labels, "
              "ranges or bounds); each is left out and counted in rankstat_series_invalid_total",
              s.name(), s.identity().pid);
        }
      }
      over_limit += s.series_over_limit();
      invalid += s.invalid_series();
      refused.no_space += s.refused_registrations().no_space;
      refused.full += s.refused_registrations().full;
      refused.other += s.refused_registrations().other;
    };
    if (t.current) refresh(*t.current);
    for (auto& p : t.previous) refresh(*p);
  }
  counters_.series_over_limit = over_limit;
  counters_.series_invalid = invalid;
  counters_.registrations_refused_no_space = refused.no_space;
  counters_.registrations_refused_full = refused.full;
  counters_.registrations_refused_other = refused.other;
  resolve_declarations();
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
