// Discovery, validation, liveness and retirement of every segment in the shm directory.
//
// The directory is the registry: a periodic scan finds new segments (inotify only makes the scan come
// sooner), and a changed inode under a known name is a new generation of a restarted rank. A generation
// that can count no more (DEAD, CLOSED) is folded at once: its counter and histogram totals move into
// RetiredTotals, persisted with --state.dir (so no exported counter ever goes backwards, even over a
// daemon restart), and the scrape no longer sums them from its mapping. Older and dead generations stay
// mapped for `dead_grace` so their last gauge values and per-pid series remain visible; then they are
// retired: the mapping is dropped and, when the totals are persisted, the segment file is unlinked if its
// name still points to the same inode. Live generations' totals are checkpointed (save_checkpoints) so that
// a generation that ends while no daemon runs is recovered by the next one. Single-threaded: used only
// from the daemon's io thread.
#pragma once

#include <sys/stat.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "family_declarations.hpp"
#include "log_limiter.hpp"
#include "rank_segment.hpp"
#include "rankstat/shmproto/reader.hpp"
#include "rankstat/shmproto/trust.hpp"
#include "retired_totals.hpp"

namespace rankstat {

// Why the registry refused a segment file: one of its own trust rules, or (kInvalid) the reader's
// validation, whose shm::RejectReason says more.
// Why a segment file was refused: the trust rule (shmproto/trust.hpp, shared with `rankstat --direct`), a
// second name for an inode already read, a file that shrank while its header was read, or a header that
// failed validation (shm::RejectReason).
struct Rejection {
  enum class Kind : std::uint8_t { kUntrusted, kHardLink, kBusError, kInvalid };
  Kind kind = Kind::kInvalid;
  shm::TrustRefusal untrusted{};                         // with kUntrusted only
  shm::RejectReason invalid = shm::RejectReason::kNone;  // with kInvalid only
  static Rejection of(shm::TrustRefusal refusal) { return {Kind::kUntrusted, refusal, {}}; }
  bool operator==(const Rejection&) const = default;
};

struct RegistryCounters {
  std::array<std::uint64_t, shm::kRejectReasonCount> rejected_by_reason{};
  // A family declared with another type, gauge mode or buckets than the winning declaration (the newest
  // live one, resolve_declarations), by a held generation or by the retired totals: each such (family,
  // generation) counted and logged once when found. Only that family's series of the losing generation
  // are left out; family_conflict_series counts them now.
  std::uint64_t family_conflicts = 0;
  std::uint64_t family_conflict_series = 0;
  std::uint64_t generations_replaced = 0;
  // Dead or closed generations whose totals joined the retired totals (before their grace period ends).
  std::uint64_t generations_folded = 0;
  // Generations that ended while no daemon ran, retired from the previous daemon's checkpoint.
  std::uint64_t generations_recovered = 0;
  std::uint64_t generations_retired = 0;
  std::uint64_t segments_unlinked = 0;
  std::uint64_t temporaries_swept = 0;
  std::uint64_t corrupt_rings = 0;
  std::uint64_t scans = 0;
  // Refused by the trust rule (docs/reliability.md), by shm::TrustRefusal: before anything was mapped
  // (not a regular file such as a symlink or a FIFO, writable by others, owned by a user that is neither
  // the daemon's, root, nor allowed), or once its header named another instance than its file name.
  std::array<std::uint64_t, shm::kTrustRefusalCount> rejected_untrusted{};
  // A second name for an inode the daemon already reads (a hard link): counting it would double the rank.
  std::uint64_t rejected_hard_link = 0;
  // Generations dropped from the exposition because their file's mode or owner changed after they were
  // opened (re-checked on every scan); also counted under their reason above.
  std::uint64_t dropped_untrusted = 0;
  // Descriptor pressure: EMFILE / ENFILE seen by a liveness check, a segment open or a directory listing.
  // Such a failure is never a verdict: the rank keeps its state and the segment is retried.
  std::uint64_t fd_exhaustion = 0;
  // Liveness checks that could not tell (any /proc error but "no such process"): the state was kept.
  std::uint64_t liveness_unknown = 0;
  // Segment opens that failed for a transient reason (EMFILE, ENFILE, ENOMEM) and are retried next scan.
  std::uint64_t open_retries = 0;
  // Series left out because a segment declared more than --shm.max-series-per-segment.
  std::uint64_t series_over_limit = 0;
  // Series descriptors left out because they failed validation (a writer's bug or a forged segment).
  std::uint64_t series_invalid = 0;
  // Registrations writers refused, by reason (their cumulative headers' counts, summed with the retired).
  std::uint64_t registrations_refused_no_space = 0;
  std::uint64_t registrations_refused_full = 0;
  std::uint64_t registrations_refused_other = 0;
  // Every record applied from any ring, including the last drain of a generation that died or closed.
  std::uint64_t records_drained = 0;
  // Quarantined after it was opened: its last good values stay, its memory or ring is no longer read.
  std::uint64_t quarantined_ring_index = 0;
  std::uint64_t quarantined_ring_record = 0;
  std::uint64_t quarantined_truncated = 0;
  std::uint64_t quarantined_bus_error = 0;
  std::uint64_t log_lines_suppressed = 0;
};

// One drain of every ring: what the poll pacer steers by.
struct DrainPass {
  std::uint64_t records = 0;  // applied
  double fullest_fill = 0;    // the largest fraction of a ring one drain consumed
  bool drops = false;         // some writer dropped a record since its previous drain
};

struct RegistryOptions {
  std::string directory = "/dev/shm";
  std::vector<std::string> instances;  // empty: all
  std::string instance_label;          // composed into retired totals' labels as into live ones
  std::chrono::milliseconds dead_grace{std::chrono::minutes(5)};
  // Which segment files are believed (shmproto/trust.hpp, the rule `rankstat --direct` applies too):
  // --shm.allowed-uids, --shm.allow-world-writable, --shm.instance-owner.
  shm::SegmentTrust trust;
  // Series read per generation at most; the rest are dropped and counted (one rank cannot make the
  // daemon allocate without bound).
  std::uint32_t max_series_per_segment = 100000;
  // Descriptors the registry may hold, two per generation (its segment and the daemon's pidfd for its
  // writer); 0: the soft RLIMIT_NOFILE minus a reserve for HTTP connections and /proc checks. Segments
  // beyond it wait (counted as fd pressure, retried every scan) instead of starving the rest.
  std::uint64_t fd_budget = 0;
  // Gauges integrated over time and their window extrema (--aggregate.*); fixed at start.
  IntegralSettings integrals;
};

// A rank's ring counters carried over the generations that left its name (rankstat_ring_*_total never
// reset when a writer restarts under the same name, as long as the daemon runs).
struct RingTotals {
  std::uint64_t records = 0;
  std::uint64_t dropped = 0;
  std::uint64_t sequence_gaps = 0;
  std::uint64_t malformed = 0;
};

class SegmentRegistry {
 public:
  // `retired` must outlive the registry.
  SegmentRegistry(RegistryOptions options, RetiredTotals& retired);

  // Lists the directory, opens new segments and new generations, sweeps temporaries left by
  // writers that died while creating one. Returns the number of generations opened.
  int scan(std::uint64_t now_ns);
  // Drains every ring that can still have records.
  DrainPass drain_all(std::uint64_t now_ns);
  // Re-evaluates LIVE / STALLED / DEAD / CLOSED for every current generation. Returns the number of
  // generations that changed state.
  int check_liveness(std::uint64_t now_ns, std::chrono::milliseconds stall_after);
  // Retires generations dead or closed for longer than the grace period. Returns how many.
  int retire_expired(std::uint64_t now_ns);
  void refresh_cumulative();
  // Before a scrape: every generation's integrals held up to its writer's last sign of life.
  void settle_integrals(std::uint64_t now_ns);
  // With --state.dir, checkpoints what every held generation has counted (CheckpointFile::save_live):
  // its integrals, and its totals while the retired totals on disk do not hold them. Called before a
  // scrape is answered (after settle_integrals) and at a clean stop; scan() calls it itself when it opened
  // a generation or one lost its name.
  bool save_checkpoints(std::string& error);
  const IntegralSettings& integrals() const { return options_.integrals; }
  void set_instances(std::vector<std::string> instances) { options_.instances = std::move(instances); }
  void set_dead_grace(std::chrono::milliseconds grace) { options_.dead_grace = grace; }
  void set_max_series_per_segment(std::uint32_t limit) { options_.max_series_per_segment = limit; }
  // New trust settings apply to segments opened from now on (and to rejected ones at the next scan).
  void set_trust(std::vector<std::uint32_t> allowed_uids, bool any_owner, bool allow_world_writable,
                 std::map<std::string, std::vector<std::uint32_t>> instance_owners = {});

  // Every generation the daemon holds, current ones first, in segment-name order.
  std::vector<const RankSegment*> generations() const;
  std::vector<const RankSegment*> current() const;
  const RankSegment* find_current(const std::string& id) const;
  // Live generations whose writer's pid is visible: candidates for exit notification (pidfd).
  std::vector<const RankSegment*> pid_watchable() const;
  // Records that the daemon holds (or no longer holds) an exit notification for this generation's
  // writer; see RankSegment::exit_watched.
  void set_exit_watched(const std::string& name, std::uint64_t generation, bool watched);
  bool heartbeat_only(const RankSegment& segment) const;
  // The ring counters of `segment`'s name: those of its earlier generations plus its own.
  RingTotals ring_totals(const RankSegment& segment) const;
  const RegistryCounters& counters() const { return counters_; }
  const std::string& directory() const { return options_.directory; }
  bool scanned_once() const { return counters_.scans > 0; }
  const RetiredTotals& retired() const { return retired_; }
  // Families whose retired series are left out of the scrape: a held generation's declaration of them
  // wins over the retired totals' (RetiredTotals::contribute).
  const std::set<std::string>& retired_families_left_out() const { return declarations_.retired_left_out(); }

 private:
  struct Tracked {
    std::unique_ptr<RankSegment> current;  // null once retired and not replaced
    std::vector<std::unique_ptr<RankSegment>> previous;
    bool pid_visible = true;          // false: the writer lives in another pid namespace; judge by heartbeat
    std::uint64_t retired_inode = 0;  // a retired generation whose file could not be unlinked
    std::uint64_t retired_device = 0;
    RingTotals carried;  // ring counters of generations that left this name
  };
  // A refused file, remembered with what was refused: it is looked at again only when its inode, owner,
  // mode, size or ctime change, and counted and logged again only when the inode or reason change.
  struct Rejected {
    std::uint64_t inode = 0;
    std::uint64_t device = 0;
    std::uint32_t mode = 0;
    std::uint32_t uid = 0;
    std::uint32_t gid = 0;
    std::int64_t size = 0;
    std::int64_t ctime_ns = 0;
    Rejection reason;
    bool recheck = false;  // the trust settings changed: look again even if the file did not
    bool same_file(const struct stat& st) const;
  };

  bool wanted(const std::string& instance) const;
  // nullopt if `st` may be opened; else the trust rule it breaks, with a message.
  // `instance`: the one the file name claims, for --shm.instance-owner.
  std::optional<shm::TrustRefusal> distrust(const struct stat& st, const std::string& instance,
                                            std::string& message) const;
  void reject(const std::string& name, const struct stat& st, Rejection reason, const std::string& message,
              std::uint64_t now_ns);
  // Counts and logs (once per generation, rate-limited) a ring or memory fault found since the last call.
  void note_faults(const RankSegment& segment, std::uint64_t now_ns);
  void open_generation(const std::string& name, const struct stat& st, std::uint64_t now_ns);
  void sweep_temporary(const std::string& name, std::uint64_t now_ns);
  // Resolves the declarations of every held generation and `pending` (one being opened, not tracked
  // yet): FamilyDeclarations, which marks the losing series left out.
  void resolve_declarations(RankSegment* pending = nullptr);
  // Moves a generation that can count no more into the retired totals (see RetiredTotals::fold); saved by
  // the next persist_retired().
  void fold(RankSegment& segment, std::uint64_t now_ns);
  // Saves the retired totals if a fold is unsaved; false (logged once until a save works) if it failed.
  bool persist_retired();
  // After a scan: folds the checkpointed totals of generations a previous daemon held that are gone.
  void resolve_checkpoints();
  // True only when `key`'s generation can never be opened again: its name is absent, or holds another
  // generation that is open or retired. Unknown (a refused or unopened file) is false.
  bool generation_gone(const RetiredTotals::GenerationKey& key) const;
  bool retire(RankSegment& segment);
  // Drains one generation and adds what it applied to counters_.records_drained.
  bool drain_counted(RankSegment& segment, std::uint64_t now_ns);
  // Adds a generation leaving its name (replaced or retired) to the name's carried ring totals.
  void carry_ring_totals(Tracked& tracked, const RankSegment& segment);
  // The name already tracking the inode `st` names under another name, or nullptr.
  const std::string* inode_holder(const struct stat& st, const std::string& name) const;
  // Counts and logs (rate-limited) a descriptor or memory shortage met while doing `what`.
  void note_resource_error(int error, const std::string& what, std::uint64_t now_ns);

  RegistryOptions options_;
  RetiredTotals& retired_;
  std::map<std::string, Tracked> tracked_;
  std::map<std::string, Rejected> rejected_;
  FamilyDeclarations declarations_;
  RegistryCounters counters_;
  LogLimiter log_limiter_{50, 1'000'000'000ull};
  // Generations found on disk that the retired totals already hold (skipped, never counted twice).
  std::set<RetiredTotals::GenerationKey> retired_skipped_;
  bool pruned_retired_generations_ = false;
  bool warned_other_consumer_ = false;
  bool checkpoint_due_ = false;
  // What the last checkpoint held for each held generation, brought up to date in place before the next
  // one (refresh_cumulative_totals: no label, family or help built again), with the labels of its
  // cumulative series, built once (cumulative_totals).
  struct HeldCheckpoint {
    RetiredTotals::LiveCheckpoint checkpoint;
    CumulativeLabels labels;
    std::uint64_t resolution = 0;  // the declarations' version() its totals were built under
  };
  std::map<RetiredTotals::GenerationKey, HeldCheckpoint> checkpoints_;
  // The inputs of the last checkpoint written (see save_checkpoints): while none changed, the file
  // already says exactly what a new one would, and nothing is serialized or written.
  bool checkpoint_current_ = false;
  std::size_t checkpoint_unclaimed_ = 0;
  bool checkpoint_dropped_unclaimed_ = false;
  bool persist_failure_logged_ = false;
  std::uint64_t fd_budget_ = 0;
  std::uint64_t retired_series_over_limit_ = 0;
  std::uint64_t retired_series_invalid_ = 0;
  shm::CumulativeReader::Refused retired_refused_;
};

// The state a generation is in now, from its producer fields and its process.
// A /proc check that fails for another reason than "no such process" (EMFILE, EACCES...) is not a
// verdict: the previous state is kept and the errno is stored in `*check_error` (0 when the check worked).
RankState evaluate_liveness(const RankSegment& segment, bool pid_visible, std::uint64_t now_ns,
                            std::chrono::milliseconds stall_after, int* check_error = nullptr);

}  // namespace rankstat
