// Discovery, validation, liveness and retirement of every segment in the shm directory.
//
// The directory is the registry: a periodic scan finds new segments (inotify only makes the scan come
// sooner), and a changed inode under a known name is a new generation of a restarted rank. Older and
// dead generations stay mapped for `dead_grace` so their last values and per-pid series remain
// visible; then they are retired: their counter and histogram totals move into RetiredTotals (so no
// exported counter ever goes backwards), the mapping is dropped and, when the totals are persisted,
// the segment file is unlinked if its name still points to the same inode. Single-threaded: used
// only from the daemon's io thread.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "rank_segment.hpp"
#include "rankstat/shmproto/reader.hpp"
#include "retired_totals.hpp"

namespace rankstat {

struct RegistryCounters {
  std::array<std::uint64_t, shm::kRejectReasonCount> rejected_by_reason{};
  std::uint64_t schema_conflicts = 0;
  std::uint64_t generations_replaced = 0;
  std::uint64_t generations_retired = 0;
  std::uint64_t segments_unlinked = 0;
  std::uint64_t temporaries_swept = 0;
  std::uint64_t corrupt_rings = 0;
  std::uint64_t scans = 0;
};

struct RegistryOptions {
  std::string directory = "/dev/shm";
  std::vector<std::string> instances;  // empty: all
  std::string instance_label;          // composed into retired totals' labels as into live ones
  std::chrono::milliseconds dead_grace{std::chrono::minutes(5)};
};

class SegmentRegistry {
 public:
  // `retired` must outlive the registry.
  SegmentRegistry(RegistryOptions options, RetiredTotals& retired);

  // Lists the directory, opens new segments and new generations, sweeps temporaries left by
  // writers that died while creating one. Returns the number of generations opened.
  int scan(std::uint64_t now_ns);
  // Drains every ring that can still have records; returns records applied.
  std::uint64_t drain_all(std::uint64_t now_ns);
  // Re-evaluates LIVE / STALLED / DEAD / CLOSED for every current generation. Returns the number of
  // generations that changed state.
  int check_liveness(std::uint64_t now_ns, std::chrono::milliseconds stall_after);
  // Retires generations dead or closed for longer than the grace period. Returns how many.
  int retire_expired(std::uint64_t now_ns);
  void refresh_cumulative();
  void set_instances(std::vector<std::string> instances) { options_.instances = std::move(instances); }
  void set_dead_grace(std::chrono::milliseconds grace) { options_.dead_grace = grace; }

  // Every generation the daemon holds, current ones first, in segment-name order.
  std::vector<const RankSegment*> generations() const;
  std::vector<const RankSegment*> current() const;
  const RankSegment* find_current(const std::string& id) const;
  // Live generations whose writer's pid is visible: candidates for exit notification (pidfd).
  std::vector<const RankSegment*> pid_watchable() const;
  bool heartbeat_only(const RankSegment& segment) const;
  const RegistryCounters& counters() const { return counters_; }
  const std::string& directory() const { return options_.directory; }
  bool scanned_once() const { return counters_.scans > 0; }
  const RetiredTotals& retired() const { return retired_; }

 private:
  struct Tracked {
    std::unique_ptr<RankSegment> current;  // null once retired and not replaced
    std::vector<std::unique_ptr<RankSegment>> previous;
    bool pid_visible = true;  // false: the writer lives in another pid namespace; judge by heartbeat
    std::uint64_t retired_inode = 0;  // a retired generation whose file could not be unlinked
  };
  struct Rejected {
    std::uint64_t inode = 0;
    shm::RejectReason reason = shm::RejectReason::kNone;
  };

  bool wanted(const std::string& instance) const;
  void open_generation(const std::string& name, std::uint64_t now_ns);
  void sweep_temporary(const std::string& name, std::uint64_t now_ns);
  void check_schema(RankSegment& segment);
  bool retire(RankSegment& segment);

  RegistryOptions options_;
  RetiredTotals& retired_;
  std::map<std::string, Tracked> tracked_;
  std::map<std::string, Rejected> rejected_;
  // Family -> (kind, gauge mode) as first registered; a disagreeing segment is rejected.
  std::map<std::string, std::pair<shm::SeriesKind, shm::GaugeMode>> schema_;
  RegistryCounters counters_;
  // Generations found on disk that the retired totals already hold (skipped, never counted twice).
  std::set<RetiredTotals::GenerationKey> retired_skipped_;
  bool pruned_retired_generations_ = false;
};

// The state a generation is in now, from its producer fields and its process.
RankState evaluate_liveness(const RankSegment& segment, bool pid_visible, std::uint64_t now_ns,
                            std::chrono::milliseconds stall_after);

}  // namespace rankstat
