// The checkpoint file (integrals.json in --state.dir): what the generations the daemon holds have counted,
// saved before every scrape is answered, when a generation is opened or loses its name, and at a clean
// stop. Without fsync: the segments it describes live in /dev/shm, which a reboot empties too, and a
// daemon crash leaves the renamed file in the page cache.
//   integrals: each integrated gauge's state (gauge_integral.hpp), by IntegratedGauge::checkpoint_key;
//              a restarted daemon continues each integral from there, so it never goes backwards.
//   totals:    a generation's cumulative series while the retired totals on disk do not hold them; when
//              a restarted daemon finds the generation gone (its successor renamed over it, or its file
//              removed, while no daemon ran), it folds them (RetiredTotals::fold_unclaimed): the counts
//              Prometheus saw are never lost.
// A loaded entry stays "unclaimed" until an opened generation claims it (take) or the registry decides on
// it (drop). Used only from the io thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "generation_contributions.hpp"
#include "rank_integrals.hpp"

namespace rankstat {

// Identity of a generation: segment name and its random generation nonce.
using GenerationKey = std::pair<std::string, std::uint64_t>;
using IntegralCheckpoints = std::map<std::string, IntegralCheckpoint>;
struct LiveCheckpoint {
  IntegralCheckpoints integrals;
  std::optional<CumulativeTotals> totals;
};

class CheckpointFile {
 public:
  // `path` empty: no file (nothing is loaded or saved).
  explicit CheckpointFile(std::string path) : path_(std::move(path)) {}

  // Loads the file: a missing, unreadable or invalid one loads nothing (logged; never an error that
  // stops the daemon). Totals that must not be served are dropped and counted in `invalid`; entries of
  // generations `retired` holds already (written before the retired totals that hold them were known to
  // be saved) are dropped.
  void load(const std::function<bool(const GenerationKey&)>& retired, std::uint64_t& invalid);
  // Claims a loaded entry for a generation that was opened: returns its integrals; its totals are
  // dropped (the segment itself has them, as high or higher).
  IntegralCheckpoints take(const GenerationKey& generation);
  // Writes `live`, and the loaded entries no generation has claimed yet: until `drop_unclaimed` those
  // with integrals only, and those with totals until the registry folds or drops them.
  bool save(const std::map<GenerationKey, LiveCheckpoint>& live, bool drop_unclaimed, std::string& error);
  // The same, for checkpoints the caller keeps (no copy); empty ones are not written.
  bool save_live(const std::map<GenerationKey, const LiveCheckpoint*>& live, bool drop_unclaimed,
                 std::string& error);
  // Loaded entries no generation has claimed yet (the set only shrinks after load()).
  std::size_t unclaimed() const { return unclaimed_.size(); }
  // Loaded entries with totals that no opened generation claimed, and the totals of one (or null).
  std::vector<GenerationKey> unclaimed_totals() const;
  const CumulativeTotals* totals_of(const GenerationKey& generation) const;
  void drop(const GenerationKey& generation) { unclaimed_.erase(generation); }

  // The "types" and "label_sets" tables, kept from one save to the next (defined in the .cpp).
  struct Types;

 private:
  std::string path_;
  std::map<GenerationKey, LiveCheckpoint> unclaimed_;
  std::string last_text_;  // what the file holds: unchanged values are not written again
  std::shared_ptr<Types> types_;
};

}  // namespace rankstat
