// Totals of retired generations: the counters and histograms of ranks that died or exited and whose
// segments the daemon has let go of. Folding them here keeps every exported counter monotonic across
// rank restarts without keeping one mapping (or one file) per dead process, which is what makes the
// incumbent's scrape time and directory grow forever.
//
// With a state directory the store is persisted (exclusive temporary, fsync, rename, directory fsync) before
// a segment is unlinked, together with the generations it already holds, so a daemon restart neither loses a
// retired total nor counts a still-present segment twice. Used only from the io thread.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "aggregation.hpp"

namespace rankstat {

class RetiredTotals {
 public:
  // `state_dir` empty: memory only.
  explicit RetiredTotals(std::string state_dir);

  // Loads the persisted store; a missing file is an empty store, a corrupt one is an error (the file
  // is left for inspection and the store starts empty). A symlink is never followed. Each entry is
  // validated as a segment's series would be (metric and label names, UTF-8 values, finite numbers,
  // consistent buckets); invalid entries are dropped, counted and logged once.
  bool load(std::string& error);
  // Writes the store atomically: an exclusive temporary of a random name (O_EXCL | O_NOFOLLOW), fsync,
  // rename, directory fsync. Returns false (with a message) if it could not.
  bool save(std::string& error) const;
  bool persistent() const { return !path_.empty(); }
  // Refuses a state directory that others could plant files in: not a directory, not owned by this
  // user or root, or writable by group or others. Call before load().
  bool check_directory(std::string& error) const;
  // Entries of the loaded state file dropped as invalid (never served); see load().
  std::uint64_t invalid_entries() const { return invalid_entries_; }

  // Identity of a generation: segment name and its random generation nonce.
  using GenerationKey = std::pair<std::string, std::uint64_t>;
  bool holds(const GenerationKey& generation) const { return generations_.count(generation) != 0; }
  // A retired generation of this nonce under any name (a hard link or copy found after the original was
  // retired and unlinked must not be counted again).
  bool holds_nonce(std::uint64_t nonce) const;
  void forget_generations_except(const std::set<GenerationKey>& still_present);

  // Folds one generation's counter and histogram series (labels already composed).
  // `help` is the family's HELP text as the engine declared it (empty: the typed record's catalog);
  // `summary`: a summary (no bounds), exported as such.
  void add_counter(const GenerationKey& generation, const std::string& family, const Labels& labels,
                   double value, const std::string& help = {});
  void add_histogram(const GenerationKey& generation, const std::string& family, const Labels& labels,
                     const std::vector<double>& bounds, const std::vector<std::uint64_t>& counts, double sum,
                     const std::string& help = {}, bool summary = false);
  void mark_retired(const GenerationKey& generation) { generations_.insert(generation); }

  // Integrals of the generations the daemon still holds (gauge_integral.hpp), by generation and
  // IntegratedGauge::checkpoint_key. Saved (with a state directory) before every scrape is answered, so a
  // restarted daemon continues each integral from at least the value Prometheus last read: the counter
  // never goes backwards. Loaded by load(); each generation's entries are handed out once, when it opens.
  using Checkpoints = std::map<std::string, IntegralCheckpoint>;
  Checkpoints take_checkpoints(const GenerationKey& generation);
  // Writes `live` (and, until `drop_unclaimed`, the loaded entries no generation has claimed yet).
  // Without fsync: the segments these values belong to live in /dev/shm and do not survive a reboot
  // either, and a daemon crash leaves the renamed file in the page cache.
  bool save_checkpoints(const std::map<GenerationKey, Checkpoints>& live, bool drop_unclaimed,
                        std::string& error);

  // Adds the retired totals to a family set (help text from the catalog).
  void contribute(FamilySet& out) const;
  std::size_t series() const { return counters_.size() + histograms_.size(); }
  std::size_t generations() const { return generations_.size(); }

 private:
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
  std::map<GenerationKey, Checkpoints> unclaimed_checkpoints_;
  std::string last_checkpoint_text_;  // what the file holds: unchanged values are not written again
  std::uint64_t invalid_entries_ = 0;
  std::set<GenerationKey> generations_;
  std::map<SeriesKey, Counter> counters_;
  std::map<SeriesKey, Histogram> histograms_;
};

}  // namespace rankstat
