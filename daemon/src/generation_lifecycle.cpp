// Generation lifecycle: judging each held generation's liveness (pidfd, /proc start time, heartbeat,
// stall), folding a generation that stopped into the retired totals (once, so nothing is counted twice),
// and retiring it after the grace period: its counters saved with the retired totals, then its file
// removed. A held generation becomes DEAD or CLOSED here (one found so at attach: segment_admission.cpp).
// Thread contract: the daemon's io thread only; the retired totals it folds into are owned by that
// thread too.
#include "segment_registry.hpp"

#include <spdlog/spdlog.h>

#include "rankstat/shmproto/process.hpp"

namespace rankstat {

namespace {

std::uint64_t to_ns(std::chrono::milliseconds d) {
  return static_cast<std::uint64_t>(d.count()) * 1'000'000ull;
}

bool expired(const RankSegment& s, std::uint64_t now_ns, std::uint64_t grace_ns) {
  return !is_live(s.state()) && now_ns >= s.state_since_ns() && now_ns - s.state_since_ns() > grace_ns;
}

}  // namespace

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

}  // namespace rankstat
