// The segment registry's holdings: the generations held per segment name (current and replaced ones),
// draining their rings each poll, reading their cumulative blocks and resolving family declarations
// across them, and the read-only views the scrape and the pid watcher use. How generations are admitted
// (segment_admission.cpp), refused (segment_refusals.cpp), judged and retired (generation_lifecycle.cpp)
// and checkpointed (generation_checkpoints.cpp) is in the files named so.
// Thread contract: one thread (the daemon's io thread) calls every method; the const views are read by
// the same thread while it renders a scrape.
#include "segment_registry.hpp"

#include <spdlog/spdlog.h>
#include <sys/resource.h>

#include <algorithm>

#include "rankstat/shmproto/bus_guard.hpp"
#include "rankstat/shmproto/naming.hpp"

namespace rankstat {

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

void SegmentRegistry::settle_integrals(std::uint64_t now_ns) {
  if (!options_.integrals.enabled()) return;
  for (auto& [name, t] : tracked_) {
    if (t.current) t.current->settle_integrals(now_ns);
    for (auto& p : t.previous) p->settle_integrals(now_ns);
  }
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
