#include "segment_registry.hpp"

#include <dirent.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include <algorithm>

#include "rankstat/shmproto/naming.hpp"
#include "rankstat/shmproto/process.hpp"

namespace rankstat {

namespace {
// SGLang refreshes an idle rank's stats after 30 s without a batch and reports gen_throughput 0.
constexpr std::uint64_t kGenThroughputStaleNs = 30'000'000'000ull;
}  // namespace

SegmentRegistry::SegmentRegistry(std::string directory, std::vector<std::string> instances)
    : directory_(std::move(directory)), instances_(std::move(instances)) {}

bool SegmentRegistry::wanted(const std::string& instance) const {
  return instances_.empty() || std::find(instances_.begin(), instances_.end(), instance) != instances_.end();
}

int SegmentRegistry::scan(std::uint64_t now_ns) {
  ++counters_.scans;
  DIR* dir = opendir(directory_.c_str());
  if (dir == nullptr) {
    spdlog::warn("cannot list shm directory {}: {}", directory_, shm::errno_text(errno));
    return 0;
  }
  std::vector<std::string> names;
  while (const dirent* entry = readdir(dir)) {
    const std::string name = entry->d_name;
    const auto parsed = shm::parse_segment_name(name);
    if (parsed && wanted(parsed->instance)) names.push_back(name);
  }
  closedir(dir);
  std::sort(names.begin(), names.end());
  int opened = 0;
  for (const std::string& name : names) {
    const std::string path = directory_ + "/" + name;
    struct stat st {};
    if (lstat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
    auto it = tracked_.find(name);
    if (it != tracked_.end() && it->second.current->inode() == st.st_ino &&
        it->second.current->device() == st.st_dev) {
      continue;  // same generation
    }
    auto rejected = rejected_.find(name);
    if (rejected != rejected_.end() && rejected->second.inode == st.st_ino) continue;  // reported once already
    const std::size_t before = tracked_.count(name) != 0 ? tracked_[name].previous.size() : 0;
    open_generation(name, now_ns);
    auto now_it = tracked_.find(name);
    if (now_it != tracked_.end() && now_it->second.current->inode() == st.st_ino) {
      ++opened;
      if (now_it->second.previous.size() > before) ++counters_.generations_replaced;
    }
  }
  return opened;
}

void SegmentRegistry::open_generation(const std::string& name, std::uint64_t now_ns) {
  const std::string path = directory_ + "/" + name;
  shm::OpenedSegment opened = shm::open_segment(path, /*consumer=*/true);
  if (opened.reason == shm::RejectReason::kNotReady) return;  // a writer mid-creation: next scan
  if (opened.reason != shm::RejectReason::kNone) {
    struct stat st {};
    const std::uint64_t inode = lstat(path.c_str(), &st) == 0 ? st.st_ino : 0;
    rejected_[name] = Rejected{inode, opened.reason};
    ++counters_.rejected_by_reason[static_cast<std::size_t>(opened.reason)];
    spdlog::warn("rejected segment ({}): {}", shm::reject_reason_name(opened.reason), opened.message);
    return;
  }
  rejected_.erase(name);
  const std::uint32_t pid = opened.identity.pid;
  const std::uint64_t start_ticks = opened.identity.pid_start_ticks;
  auto segment = std::make_unique<RankSegment>(name, path, std::move(opened), now_ns);
  Tracked& t = tracked_[name];
  if (t.current) {
    // A restarted rank renamed a new generation onto the name: drain what the old one still holds,
    // then keep it for its totals.
    t.current->drain(now_ns);
    t.current->refresh_cumulative();
    if (is_live(t.current->state())) t.current->set_state(RankState::kDead, now_ns);
    spdlog::info("segment {} replaced by a new generation (pid {} -> {})", name, t.current->identity().pid, pid);
    t.previous.push_back(std::move(t.current));
  } else {
    spdlog::info("attached segment {} (pid {})", name, pid);
  }
  // A writer whose pid we cannot see but whose heartbeat is fresh lives in another pid namespace.
  t.pid_visible = start_ticks == 0 ? false : shm::process_start_ticks(pid).has_value();
  t.current = std::move(segment);
}

std::uint64_t SegmentRegistry::drain_all(std::uint64_t now_ns) {
  std::uint64_t before = 0;
  std::uint64_t after = 0;
  for (auto& [name, t] : tracked_) {
    RankSegment& s = *t.current;
    before += s.records_drained();
    const bool was_corrupt = s.ring_corrupt();
    if (!s.drain(now_ns) && !was_corrupt) {
      ++counters_.corrupt_rings;
      spdlog::error("segment {}: ring indices or record lengths are inconsistent; quarantined (last good "
                    "values kept, ring no longer read)",
                    name);
    }
    after += s.records_drained();
  }
  return after - before;
}

RankState evaluate_liveness(const RankSegment& segment, bool pid_visible, std::uint64_t now_ns,
                            std::chrono::milliseconds stall_after) {
  const RankState previous = segment.state();
  if (previous == RankState::kDead || previous == RankState::kClosed) return previous;  // terminal
  const shm::ProducerState p = segment.producer();
  if (p.closed) return RankState::kClosed;
  const shm::SegmentHeader& h = segment.identity();
  if (pid_visible) {
    const auto ticks = shm::process_start_ticks(h.pid);
    if (!ticks || *ticks != h.pid_start_ticks) return RankState::kDead;  // gone, or the pid was reused
  }
  const auto stall_ns = static_cast<std::uint64_t>(stall_after.count()) * 1'000'000ull;
  if (now_ns > p.heartbeat_ns && now_ns - p.heartbeat_ns > stall_ns) return RankState::kStalled;
  return RankState::kLive;
}

void SegmentRegistry::check_liveness(std::uint64_t now_ns, std::chrono::milliseconds stall_after) {
  for (auto& [name, t] : tracked_) {
    RankSegment& s = *t.current;
    const RankState before = s.state();
    const RankState after = evaluate_liveness(s, t.pid_visible, now_ns, stall_after);
    s.apply_staleness(now_ns, kGenThroughputStaleNs);
    if (after == before) {
      s.update_rate(now_ns);
      continue;
    }
    if (after == RankState::kDead || after == RankState::kClosed) {
      s.drain(now_ns);  // whatever the rank committed before it went away
      s.refresh_cumulative();
    }
    s.set_state(after, now_ns);
    s.update_rate(now_ns);
    spdlog::info("segment {} (pid {}): {} -> {}", name, s.identity().pid, rank_state_name(before),
                 rank_state_name(after));
  }
}

void SegmentRegistry::refresh_cumulative() {
  for (auto& [name, t] : tracked_) {
    if (t.current->state() != RankState::kDead && t.current->state() != RankState::kClosed) {
      t.current->refresh_cumulative();
    }
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
  for (const auto& [name, t] : tracked_) out.push_back(t.current.get());
  return out;
}

const RankSegment* SegmentRegistry::find_current(const std::string& id) const {
  auto it = tracked_.find(std::string(shm::kSegmentPrefix) + id);
  return it == tracked_.end() ? nullptr : it->second.current.get();
}

}  // namespace rankstat
