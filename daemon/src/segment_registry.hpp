// Discovery, validation and liveness of every segment in the shm directory.
//
// The directory is the registry: a periodic scan finds new segments (inotify only makes the scan come
// sooner), a changed inode under a known name is a new generation of a restarted rank, and older
// generations are kept so their counter and histogram totals stay in the sums (exported counters never
// go backwards across a rank restart). Single-threaded: used only from the daemon's io thread.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "rank_segment.hpp"
#include "rankstat/shmproto/reader.hpp"

namespace rankstat {

struct RegistryCounters {
  std::array<std::uint64_t, shm::kRejectReasonCount> rejected_by_reason{};
  std::uint64_t generations_replaced = 0;
  std::uint64_t corrupt_rings = 0;
  std::uint64_t scans = 0;
};

class SegmentRegistry {
 public:
  SegmentRegistry(std::string directory, std::vector<std::string> instances);

  // Lists the directory, opens new segments and new generations. Returns the number of new ones.
  int scan(std::uint64_t now_ns);
  // Drains every ring that can still have records; returns records applied.
  std::uint64_t drain_all(std::uint64_t now_ns);
  // Re-evaluates LIVE / STALLED / DEAD / CLOSED for every current generation.
  void check_liveness(std::uint64_t now_ns, std::chrono::milliseconds stall_after);
  void refresh_cumulative();
  void set_instances(std::vector<std::string> instances) { instances_ = std::move(instances); }

  // Every generation the daemon holds, current ones first, in segment-name order.
  std::vector<const RankSegment*> generations() const;
  std::vector<const RankSegment*> current() const;
  const RankSegment* find_current(const std::string& id) const;
  const RegistryCounters& counters() const { return counters_; }
  const std::string& directory() const { return directory_; }
  bool scanned_once() const { return counters_.scans > 0; }

 private:
  struct Tracked {
    std::unique_ptr<RankSegment> current;
    std::vector<std::unique_ptr<RankSegment>> previous;
    bool pid_visible = true;  // false: the writer lives in another pid namespace; judge by heartbeat
  };
  struct Rejected {
    std::uint64_t inode = 0;
    shm::RejectReason reason = shm::RejectReason::kNone;
  };

  bool wanted(const std::string& instance) const;
  void open_generation(const std::string& name, std::uint64_t now_ns);

  std::string directory_;
  std::vector<std::string> instances_;
  std::map<std::string, Tracked> tracked_;
  std::map<std::string, Rejected> rejected_;
  RegistryCounters counters_;
};

// The state a generation is in now, from its producer fields and its process.
RankState evaluate_liveness(const RankSegment& segment, bool pid_visible, std::uint64_t now_ns,
                            std::chrono::milliseconds stall_after);

}  // namespace rankstat
