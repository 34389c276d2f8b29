// Totals of retired generations: the counters and histograms of ranks that died or exited. Folding them
// here keeps every exported counter monotonic across rank restarts without keeping one mapping (or one
// file) per dead process, which is what makes the incumbent's scrape time and directory grow forever.
//
// A generation is folded as soon as it can count no more (DEAD, CLOSED; SegmentRegistry::fold), not when
// its grace period ends: with a state directory the store is then persisted at once (exclusive temporary,
// fsync, rename, directory fsync), together with the generations it holds, so neither a daemon restart nor
// a successor renamed over the generation's file loses its totals, and a still-present segment is never
// counted twice. What live generations have counted is checkpointed next to it (CheckpointFile), so a
// generation that ends while no daemon runs is not lost either. Used only from the io thread.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "checkpoint_file.hpp"
#include "family_set.hpp"
#include "generation_contributions.hpp"
#include "rank_segment.hpp"

namespace rankstat {

class RetiredTotals {
 public:
  using GenerationKey = rankstat::GenerationKey;  // segment name, generation nonce
  using LiveCheckpoint = rankstat::LiveCheckpoint;

  // `state_dir` empty: memory only.
  explicit RetiredTotals(std::string state_dir);

  // Loads the persisted store; a missing file is an empty store, a corrupt one is an error (the file
  // is left for inspection and the store starts empty). A symlink is never followed. Each entry is
  // validated as a segment's series would be (metric and label names, UTF-8 values, finite increasing
  // bounds, consistent buckets, no negative counter total; NaN and infinities are kept, written as the
  // strings "NaN", "+Inf" and "-Inf"); invalid entries are dropped, counted and logged once.
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

  // Adds one series of a generation (labels already composed); fold() adds all of a generation's. A NaN
  // or infinite value is kept as it is, as prometheus_client keeps it in a dead process's file.
  // `help` is the family's HELP text as the engine declared it (empty: the typed record's catalog);
  // `summary`: a summary (no bounds), exported as such.
  void add_counter(const GenerationKey& generation, const std::string& family, const Labels& labels,
                   double value, const std::string& help = {});
  void add_histogram(const GenerationKey& generation, const std::string& family, const Labels& labels,
                     const std::vector<double>& bounds, const std::vector<std::uint64_t>& counts, double sum,
                     const std::string& help = {}, bool summary = false);
  void mark_retired(const GenerationKey& generation);
  // Folds a generation that can count no more: adds what it contributes to the sums (its counters,
  // histograms, summaries and integrals, for_each_contribution: exactly what its last scrape served, with
  // `instance_label` composed into the labels as the scrape does) and marks it retired. A generation
  // already held adds nothing, so a generation is never folded twice. Settle its integrals first.
  void fold(const RankSegment& generation, const std::string& instance_label);
  // The same for a generation known only by the totals a checkpoint kept of it (fold_unclaimed).
  void fold(const GenerationKey& generation, const CumulativeTotals& totals);

  // What live generations have counted, next to the store (integrals.json; checkpoint_file.hpp).
  CheckpointFile& checkpoints() { return checkpoints_; }
  const CheckpointFile& checkpoints() const { return checkpoints_; }
  // Folds the totals a loaded checkpoint kept of a generation that is gone (never twice: fold()); the
  // entry stays until CheckpointFile::drop, so that it is still written while the fold is unsaved().
  void fold_unclaimed(const GenerationKey& generation);

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
  CheckpointFile checkpoints_;
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
