// What one segment generation contributes to the exposition from its cumulative block and its time
// integrals, defined once. The scrape (collect_engine_metrics) adds every contribution to a FamilySet;
// retirement (RetiredTotals::fold) and checkpoints (cumulative_totals) keep its counters, histograms and
// summaries. Both walk for_each_contribution, so a retired generation's totals are exactly what its last
// scrape served: the same series, under the same engine rule, with the same family, help and labels.
// (The scheduler snapshot contributes gauges only, which are never retired: collect_engine_metrics adds
// them itself.)
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine_rules.hpp"
#include "family_set.hpp"
#include "gauge_integral.hpp"
#include "rank_segment.hpp"

namespace rankstat {

// One series a generation contributes: a series of its cumulative block, or one of the three families
// of an integrated gauge (its integral, a counter; its window largest and smallest, max and min gauges).
struct Contribution {
  enum class Source : std::uint8_t { kSeries, kIntegral, kWindowMax, kWindowMin };
  Source source = Source::kSeries;
  // kSeries: the position in RankSegment::series(); else in RankSegment::integrated().
  std::size_t position = 0;
  shm::SeriesKind kind = shm::SeriesKind::kCounter;
  shm::GaugeMode mode = shm::GaugeMode::kSum;  // a gauge's; kSum for the other kinds
  const std::string* family = nullptr;
  // The series whose own labels (and, for kSeries, help) the contribution carries; null for the
  // families of an integrated snapshot field, which carry the identity labels alone.
  const SeriesState* series = nullptr;
  const IntegratedGauge* gauge = nullptr;  // the integrated gauge of the other sources
  std::uint64_t window_ns = 0;             // kWindowMax / kWindowMin: the window's length
  double value = 0;                        // a counter's or a gauge's
  std::uint64_t timestamp_ns = 0;          // a gauge's: when it was set (mostrecent)

  bool cumulative() const { return kind != shm::SeriesKind::kGauge; }
  bool summary() const { return kind == shm::SeriesKind::kSummary; }
  // A histogram's or summary's (series is then set): bounds (none for a summary), per-bucket counts (a
  // summary's count), sum.
  const std::vector<double>& bounds() const { return series->info.bounds; }
  const std::vector<std::uint64_t>& counts() const { return series->value.counts; }
  double sum() const { return series->value.sum; }
  // The HELP text it is served with. Built on demand: a caller that already knows the series skips it.
  std::string help() const;
  // The labels it is served with: the generation's `identity` labels (identity_labels) overridden or
  // extended by the series' own, or the series' own alone when it opts out of the identity labels.
  Labels labels(const Labels& identity) const;
  // Whether labels(identity) is `identity` itself (callers that share label sets skip building a copy).
  bool identity_labels_only() const;
  // An index unique among the generation's contributions of one source group, stable while the
  // generation is held: the series position, or three per integrated gauge.
  std::size_t slot() const {
    return source == Source::kSeries ? position
                                     : position * 3 + static_cast<std::size_t>(source) -
                                           static_cast<std::size_t>(Source::kIntegral);
  }
};

// Whether the engine-level rule lets a generation serve `series` (`engine_rule_passed`:
// exports_engine_metrics of its segment). A series declared with its own labels only came from the
// engine's own metric code, which already decided which rank reports it; the engine-level rule applies to
// series labelled by the segment. A series no rank serves declares nothing either (FamilyDeclarations).
inline bool series_exported(const SeriesState& series, bool engine_rule_passed) {
  return engine_rule_passed || (series.info.flags & shm::kSeriesWithoutIdentityLabels) != 0;
}

// `now_ns` and `peak_window_ns` (0: none) decide the window extrema of integrated gauges; without them a
// generation contributes its cumulative series and integrals only, which is all retirement needs.
struct ContributionWindow {
  std::uint64_t now_ns = 0;
  std::uint64_t peak_window_ns = 0;
};

// Calls visit(const Contribution&) for every series `s` contributes, in a fixed order: its cumulative
// series by position, then each integrated gauge's integral, window max and window min. The rules applied:
//   - a series whose family another generation declares otherwise and wins (RankSegment::
//     series_left_out) contributes nothing;
//   - the engine-level rule (series_exported);
//   - a (live)mostrecent gauge never set with a timestamp is absent (prometheus_client: the other modes
//     export a child at 0 from the moment it exists);
//   - a histogram or summary whose counts do not match its bounds (a torn read) is left out;
//   - an integrated gauge contributes once it has a value.
template <typename Visit>
void for_each_contribution(const RankSegment& s, const ContributionWindow& window, Visit&& visit) {
  const bool engine_rule_passed = exports_engine_metrics(s.identity());
  const std::vector<SeriesState>& all = s.series();
  Contribution c;
  for (std::size_t position = 0; position < all.size(); ++position) {
    const SeriesState& series = all[position];
    if (s.series_left_out(position) || !series_exported(series, engine_rule_passed)) continue;
    c = Contribution{};
    c.position = position;
    c.kind = series.info.kind;
    c.family = &series.info.family;
    c.series = &series;
    switch (series.info.kind) {
      case shm::SeriesKind::kCounter:
        c.value = series.value.value;
        break;
      case shm::SeriesKind::kGauge:
        c.mode = series.info.gauge_mode;
        if (series.value.set_ns == 0 &&
            (c.mode == shm::GaugeMode::kMostRecent || c.mode == shm::GaugeMode::kLiveMostRecent))
          continue;
        c.value = series.value.value;
        c.timestamp_ns = series.value.set_ns;
        break;
      case shm::SeriesKind::kHistogram:
      case shm::SeriesKind::kSummary:
        if (series.value.counts.size() != series.info.bounds.size() + 1) continue;
        break;
    }
    visit(static_cast<const Contribution&>(c));
  }
  const std::vector<IntegratedGauge>& gauges = s.integrated();
  for (std::size_t position = 0; position < gauges.size(); ++position) {
    const IntegratedGauge& g = gauges[position];
    if (!g.track.has_value()) continue;
    const SeriesState* series = g.field == nullptr ? &all[g.series_position] : nullptr;
    if (series != nullptr && s.series_left_out(g.series_position)) continue;
    // A snapshot field is integrated only when the engine-level rule passes (RankSegment::set_integrals).
    if (series != nullptr ? !series_exported(*series, engine_rule_passed) : !engine_rule_passed) continue;
    c = Contribution{};
    c.source = Contribution::Source::kIntegral;
    c.position = position;
    c.kind = shm::SeriesKind::kCounter;
    c.family = &g.integral_name;
    c.series = series;
    c.gauge = &g;
    c.value = g.track.integral();
    visit(static_cast<const Contribution&>(c));
    double largest = 0;
    double smallest = 0;
    if (window.peak_window_ns == 0 ||
        !g.track.window_extrema(window.now_ns, window.peak_window_ns, largest, smallest))
      continue;
    c.kind = shm::SeriesKind::kGauge;
    c.window_ns = window.peak_window_ns;
    c.timestamp_ns = g.track.integrated_until_ns();
    c.source = Contribution::Source::kWindowMax;
    c.mode = shm::GaugeMode::kMax;
    c.family = &g.window_max_name;
    c.value = largest;
    visit(static_cast<const Contribution&>(c));
    c.source = Contribution::Source::kWindowMin;
    c.mode = shm::GaugeMode::kMin;
    c.family = &g.window_min_name;
    c.value = smallest;
    visit(static_cast<const Contribution&>(c));
  }
}

// A generation's cumulative contributions (counters, histograms, summaries, and the integral counter of
// each integrated gauge) with the labels they are served with: for_each_contribution's, so exactly what
// the scrape sums from it, what folding it into the retired totals moves and what a checkpoint keeps.
// Series with the same labels (mostly a generation's identity labels) share one Labels: built once, and
// written once by a checkpoint.
struct CumulativeTotals {
  // Where a checkpoint writer last found this series' type in its table (RetiredTotals): valid while
  // the table's epoch is the same, so a series kept from one checkpoint to the next is looked up once.
  struct TypeMemo {
    std::uint64_t epoch = 0;  // 0: none
    std::size_t index = 0;
  };
  struct Counter {
    std::string family;
    std::string help;
    std::shared_ptr<const Labels> labels;
    double value = 0;
  };
  struct Histogram {
    std::string family;
    std::string help;
    std::shared_ptr<const Labels> labels;
    std::vector<double> bounds;
    std::vector<std::uint64_t> counts;
    double sum = 0;
    bool summary = false;  // no bounds, counts = {count}
  };
  std::vector<Counter> counters;
  std::vector<Histogram> histograms;
  // By position in counters and histograms (a checkpoint writer sizes them): types and label sets.
  mutable std::vector<TypeMemo> counter_types;
  mutable std::vector<TypeMemo> histogram_types;
  mutable std::vector<TypeMemo> counter_labels;
  mutable std::vector<TypeMemo> histogram_labels;
};
// The labels cumulative_totals() builds for one generation, kept by a caller that calls it again (before
// every scrape): a published series never changes, so its labels are built once, and the same objects let
// a checkpoint writer reuse what it wrote for them.
struct CumulativeLabels {
  std::shared_ptr<const Labels> base;                 // the identity labels
  std::vector<std::shared_ptr<const Labels>> series;  // by series position; null until built
};
// Integrals as they stand: settle them first (RankSegment::settle_integrals). `cache`: this generation's
// labels from the previous call, or null.
CumulativeTotals cumulative_totals(const RankSegment& s, const std::string& instance_label,
                                   CumulativeLabels* cache = nullptr);
// Brings `totals`, an earlier cumulative_totals() of the same generation, up to date in place (values
// only: no label, family or help is built again) and sets `changed` if a value moved. False if the
// generation now contributes other series (a new series, an integral's first value, a family left out):
// `totals` must then be built again.
bool refresh_cumulative_totals(const RankSegment& s, CumulativeTotals& totals, bool& changed);

}  // namespace rankstat
