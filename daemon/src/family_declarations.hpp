// One declaration per family across the generations the daemon holds (docs/semantics.md, "One
// declaration per family"): among the held generations that export a family, the newest live one's
// declaration (type, gauge mode, buckets) wins; ties go to the later start, then the smaller segment name,
// then the larger generation nonce, so the outcome does not depend on the order in which segments were
// opened. The scheduler snapshot's families keep their fixed declaration while a held generation reports
// a snapshot. Series of a losing declaration are left out (RankSegment::series_left_out), and so are the
// retired totals' series of a family a held generation declares otherwise. Declarations are recomputed
// from what is held, so one is forgotten as soon as no held generation (nor the retired totals) carries
// it. Used by SegmentRegistry, on the io thread only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "family_set.hpp"
#include "rank_segment.hpp"
#include "retired_totals.hpp"

namespace rankstat {

class FamilyDeclarations {
 public:
  FamilyDeclarations();

  // Resolves the declarations of `held` (every generation held, and one being opened) and the retired
  // totals: marks each generation's losing series left out, and the retired families that lose. Each
  // conflict, per family and losing generation (or the retired totals), is counted and logged once
  // while it lasts. Cheap when nothing changed since the last call.
  void resolve(const std::vector<RankSegment*>& held, const RetiredTotals& retired);
  // Logs the retired declarations that a fold replaced (RetiredTotals::take_replaced).
  static void note_replaced(RetiredTotals& retired);

  // Families whose retired series are left out of the scrape (RetiredTotals::contribute).
  const std::set<std::string>& retired_left_out() const { return retired_left_out_; }
  // Changes whenever resolve() recomputes: what was built under an older version may leave out other
  // series now.
  std::uint64_t version() const { return version_; }
  // Conflicts found since the start (each once), and the series left out for them now.
  std::uint64_t conflicts() const { return conflicts_; }
  std::uint64_t conflict_series() const { return conflict_series_; }

 private:
  // The scheduler snapshot's families and their fixed declarations.
  std::map<std::string, FamilyDeclaration> snapshot_declarations_;
  // What resolve() last resolved: per held generation (address, nonce, series, live, snapshot present),
  // and the retired totals' declarations_version().
  std::vector<std::tuple<const RankSegment*, std::uint64_t, std::size_t, bool, bool>> inputs_;
  std::uint64_t retired_version_ = ~0ull;
  std::set<std::string> retired_left_out_;
  // Conflicts logged and counted, as (family, segment name, generation nonce); the retired totals are
  // ("", 0). Kept while the conflict lasts, so each is reported once.
  std::set<std::tuple<std::string, std::string, std::uint64_t>> reported_;
  std::uint64_t version_ = 0;
  std::uint64_t conflicts_ = 0;
  std::uint64_t conflict_series_ = 0;
};

}  // namespace rankstat
