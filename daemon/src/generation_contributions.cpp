#include "generation_contributions.hpp"

#include <algorithm>
#include <cmath>

namespace rankstat {

std::string Contribution::help() const {
  switch (source) {
    case Source::kSeries:
      return series->info.help;
    case Source::kIntegral:
      return integral_help(gauge->family);
    case Source::kWindowMax:
      return window_help(gauge->family, true, window_ns);
    case Source::kWindowMin:
      return window_help(gauge->family, false, window_ns);
  }
  return {};
}

Labels Contribution::labels(const Labels& identity) const {
  return series != nullptr ? series_labels(identity, *series) : identity;
}

bool Contribution::identity_labels_only() const {
  if (series == nullptr) return true;
  const bool own_only = (series->info.flags & shm::kSeriesWithoutIdentityLabels) != 0;
  return !own_only && series->info.labels.empty();
}

CumulativeTotals cumulative_totals(const RankSegment& s, const std::string& instance_label,
                                   CumulativeLabels* cache) {
  CumulativeTotals out;
  CumulativeLabels local;
  CumulativeLabels& known = cache != nullptr ? *cache : local;
  if (!known.base) known.base = std::make_shared<const Labels>(identity_labels(s.identity(), instance_label));
  known.series.resize(s.series().size());
  // A contribution's labels, built once per series (its integral has the same labels) and shared with
  // the identity labels when the series adds none.
  const auto labels_of = [&](const Contribution& c) -> std::shared_ptr<const Labels> {
    if (c.identity_labels_only()) return known.base;
    const std::size_t position =
        c.source == Contribution::Source::kSeries ? c.position : c.gauge->series_position;
    std::shared_ptr<const Labels>& labels = known.series[position];
    if (!labels) labels = std::make_shared<const Labels>(c.labels(*known.base));
    return labels;
  };
  for_each_contribution(s, {}, [&](const Contribution& c) {
    switch (c.kind) {
      case shm::SeriesKind::kCounter:
        out.counters.push_back({*c.family, c.help(), labels_of(c), c.value});
        break;
      case shm::SeriesKind::kHistogram:
      case shm::SeriesKind::kSummary:
        out.histograms.push_back(
            {*c.family, c.help(), labels_of(c), c.bounds(), c.counts(), c.sum(), c.summary()});
        break;
      case shm::SeriesKind::kGauge:
        break;
    }
  });
  return out;
}

bool refresh_cumulative_totals(const RankSegment& s, CumulativeTotals& totals, bool& changed) {
  std::size_t counter = 0;
  std::size_t histogram = 0;
  bool same = true;
  // The same walk as cumulative_totals(): values only, matched by position and family.
  for_each_contribution(s, {}, [&](const Contribution& c) {
    if (!same) return;
    switch (c.kind) {
      case shm::SeriesKind::kCounter: {
        if (counter >= totals.counters.size() || totals.counters[counter].family != *c.family) {
          same = false;
          return;
        }
        double& value = totals.counters[counter++].value;
        // Compared as bits would be: a NaN total that stays NaN has not moved.
        if (value != c.value && !(std::isnan(value) && std::isnan(c.value))) {
          value = c.value;
          changed = true;
        }
        break;
      }
      case shm::SeriesKind::kHistogram:
      case shm::SeriesKind::kSummary: {
        if (histogram >= totals.histograms.size() || totals.histograms[histogram].family != *c.family ||
            totals.histograms[histogram].counts.size() != c.counts().size()) {
          same = false;
          return;
        }
        CumulativeTotals::Histogram& h = totals.histograms[histogram++];
        const bool sum_moved = h.sum != c.sum() && !(std::isnan(h.sum) && std::isnan(c.sum()));
        if (sum_moved || h.counts != c.counts()) {
          h.sum = c.sum();
          std::copy(c.counts().begin(), c.counts().end(), h.counts.begin());
          changed = true;
        }
        break;
      }
      case shm::SeriesKind::kGauge:
        break;
    }
  });
  return same && counter == totals.counters.size() && histogram == totals.histograms.size();
}

}  // namespace rankstat
