// Totals of retired generations: the counters and histograms of ranks that died or exited. Folding them
// here keeps every exported counter monotonic across rank restarts without keeping one mapping (or one
// file) per dead process, which is what makes the incumbent's scrape time and directory grow forever.
//
// A generation is folded as soon as it can count no more (DEAD, CLOSED; SegmentRegistry::fold), not when
// its grace period ends: with a state directory the store is then persisted at once (exclusive temporary,
// fsync, rename, directory fsync), together with the generations it holds, so neither a daemon restart nor
// a successor renamed over the generation's file loses its totals, and a still-present segment is never
// counted twice. What live generations have counted is checkpointed next to it (save_checkpoints), so a
// generation that ends while no daemon runs is not lost either. Used only from the io thread.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "aggregation.hpp"

namespace rankstat {

class RetiredTotals {
 public:
  // Identity of a generation: segment name and its random generation nonce.
  using GenerationKey = std::pair<std::string, std::uint64_t>;

  // `state_dir` empty: memory only.
  explicit RetiredTotals(std::string state_dir);

  // Loads the persisted store; a missing file is an empty store, a corrupt one is an error (the file
  // is left for inspection and the store starts empty). A symlink is never followed. Each entry is
  // validated as a segment's series would be (metric and label names, UTF-8 values, finite numbers,
  // consistent buckets); invalid entries are dropped, counted and logged once.
  bool load(std::string& error);
  // Writes the store atomically: an exclusive temporary of a random name (O_EXCL | O_NOFOLLOW), fsync,
  // rename, directory fsync. Returns false (with a message) if it could not; the generations folded since
  // the last successful save then stay unsaved() and the caller tries again later.
  bool save(std::string& error);
  // Generations folded or marked since the last successful save (none without a state directory once
  // saved: memory is all there is).
  bool unsaved() const { return !unsaved_.empty(); }
  // Held and on disk: a daemon restart would find it in the state file.
  bool persisted(const GenerationKey& generation) const {
    return holds(generation) && unsaved_.count(generation) == 0;
  }
  bool persistent() const { return !path_.empty(); }
  // Refuses a state directory that others could plant files in: not a directory, not owned by this
  // user or root, or writable by group or others. Call before load().
  bool check_directory(std::string& error) const;
  // Entries of the loaded state file dropped as invalid (never served); see load().
  std::uint64_t invalid_entries() const { return invalid_entries_; }

  bool holds(const GenerationKey& generation) const { return generations_.count(generation) != 0; }
  // A retired generation of this nonce under any name (a hard link or copy found after the original was
  // retired and unlinked must not be counted again).
  bool holds_nonce(std::uint64_t nonce) const;
  // Forgets the retired generations that cannot be met again: neither `still_present` (opened or skipped)
  // nor named like one of the `unidentified` files (listed but not opened yet: one may be a retired
  // generation's file kept during its grace period, which must never be counted again).
  void forget_generations_except(const std::set<GenerationKey>& still_present,
                                 const std::set<std::string>& unidentified);

  // Folds one generation's counter and histogram series (labels already composed).
  // `help` is the family's HELP text as the engine declared it (empty: the typed record's catalog);
  // `summary`: a summary (no bounds), exported as such.
  void add_counter(const GenerationKey& generation, const std::string& family, const Labels& labels,
                   double value, const std::string& help = {});
  void add_histogram(const GenerationKey& generation, const std::string& family, const Labels& labels,
                     const std::vector<double>& bounds, const std::vector<std::uint64_t>& counts, double sum,
                     const std::string& help = {}, bool summary = false);
  void mark_retired(const GenerationKey& generation);
  // Adds a generation's cumulative series (cumulative_totals) and marks it retired; a generation already
  // held adds nothing, so a generation is never folded twice.
  void fold(const GenerationKey& generation, const CumulativeTotals& totals);

  // Checkpoints of the generations the daemon holds, saved (with a state directory) before every scrape is
  // answered, when a generation is opened or loses its name, and at a clean stop. Without fsync: the
  // segments they describe live in /dev/shm, which a reboot empties too, and a daemon crash leaves the
  // renamed file in the page cache.
  //   integrals: each integrated gauge's state (gauge_integral.hpp), by IntegratedGauge::checkpoint_key;
  //              a restarted daemon continues each integral from there, so it never goes backwards.
  //   totals:    the generation's cumulative series while they are not persisted in the retired totals;
  //              when a restarted daemon finds the generation gone (its successor renamed over it, or
  //              its file removed, while no daemon ran), it folds them (fold_unclaimed): the counts
  //              Prometheus saw are never lost.
  using Checkpoints = std::map<std::string, IntegralCheckpoint>;
  struct LiveCheckpoint {
    Checkpoints integrals;
    std::optional<CumulativeTotals> totals;
  };
  // Claims a loaded checkpoint for a generation that was opened: returns its integrals; its totals are
  // dropped (the segment itself has them, as high or higher).
  Checkpoints take_checkpoints(const GenerationKey& generation);
  // Writes `live`, and the loaded entries no generation has claimed yet: until `drop_unclaimed` those
  // with integrals only, and those with totals until fold_unclaimed or drop_unclaimed decides on them.
  bool save_checkpoints(const std::map<GenerationKey, LiveCheckpoint>& live, bool drop_unclaimed,
                        std::string& error);
  // The same, for checkpoints the caller keeps (no copy); empty ones are not written.
  bool save_live_checkpoints(const std::map<GenerationKey, const LiveCheckpoint*>& live, bool drop_unclaimed,
                             std::string& error);
  // Loaded checkpoints no generation has claimed yet (the set only shrinks after load()).
  std::size_t unclaimed_checkpoints() const { return unclaimed_checkpoints_.size(); }
  // Loaded checkpoints with totals that no opened generation claimed.
  std::vector<GenerationKey> unclaimed_totals() const;
  // Folds an unclaimed checkpoint's totals (its generation is gone); the entry stays until
  // drop_unclaimed, so that it is still written while the fold is unsaved().
  void fold_unclaimed(const GenerationKey& generation);
  void drop_unclaimed(const GenerationKey& generation) { unclaimed_checkpoints_.erase(generation); }

  // The JSON text of each label set the last checkpoint wrote, by identity (CumulativeLabels keeps the same
  // objects from one checkpoint to the next, so each is escaped and checked once); holding the labels
  // keeps their address from being reused by others.
  struct WrittenLabels {
    std::shared_ptr<const Labels> labels;
    std::string json;  // empty: not UTF-8, never written
  };
  using WrittenLabelSets = std::unordered_map<const Labels*, WrittenLabels>;
  // The "types" table of the checkpoint, kept from one checkpoint to the next (defined in the .cpp).
  struct CheckpointTypes;

  // Adds the retired totals to a family set (help text from the catalog), except the families in
  // `left_out` (another declaration of theirs wins in a held generation: SegmentRegistry).
  void contribute(FamilySet& out, const std::set<std::string>& left_out = {}) const;

  // The one declaration the retired series of each family carry (counter, histogram with its bounds,
  // summary). fold() keeps it single: a generation folded with another declaration of a family replaces
  // the family's retired series (their owners declared what no held generation serves any more: the
  // caller folds only the series it serves), and the replaced declaration is reported once through
  // take_replaced(). A family whose series are all gone is forgotten.
  const std::map<std::string, FamilyDeclaration>& declarations() const { return declarations_; }
  // Changes whenever declarations() changes.
  std::uint64_t declarations_version() const { return declarations_version_; }
  struct ReplacedDeclaration {
    std::string family;
    FamilyDeclaration before;
    FamilyDeclaration after;
    GenerationKey by;
    std::size_t series_dropped = 0;
  };
  std::vector<ReplacedDeclaration> take_replaced() { return std::exchange(replaced_, {}); }
  std::size_t series() const { return counters_.size() + histograms_.size(); }
  std::size_t generations() const { return generations_.size(); }

 private:
  bool load_totals(std::string& error);
  void rebuild_declarations();
  // Before a fold adds `generation`'s series of `family` declared as `declaration`: replaces the family's
  // retired series if they carry another declaration.
  void adopt_declaration(const GenerationKey& generation, const std::string& family,
                         const FamilyDeclaration& declaration);
  // After load_totals: a checkpoint of a generation the totals already hold is dropped.
  void load_checkpoints();
  struct Counter {
    double value = 0;
    std::string help;
  };
  struct Histogram {
    std::vector<double> bounds;
    std::vector<std::uint64_t> counts;
    double sum = 0;
    std::string help;
    bool summary = false;
  };
  using SeriesKey = std::pair<std::string, Labels>;

  std::string dir_;
  std::string path_;
  std::string checkpoint_path_;
  std::map<GenerationKey, LiveCheckpoint> unclaimed_checkpoints_;
  std::string last_checkpoint_text_;  // what the file holds: unchanged values are not written again
  WrittenLabelSets written_labels_;
  std::shared_ptr<CheckpointTypes> checkpoint_types_;
  std::uint64_t invalid_entries_ = 0;
  std::set<GenerationKey> generations_;
  std::set<GenerationKey> unsaved_;  // marked since the last successful save
  std::map<SeriesKey, Counter> counters_;
  std::map<SeriesKey, Histogram> histograms_;
  std::map<std::string, FamilyDeclaration> declarations_;
  std::uint64_t declarations_version_ = 0;
  std::vector<ReplacedDeclaration> replaced_;
};

}  // namespace rankstat
