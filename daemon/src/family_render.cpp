// The family renderer: FamilySet::render writes the merged families as text format 0.0.4, byte for byte
// as prometheus_client does, keeping each series' pre-rendered sample heads for the next scrape so a
// scrape that finds the same series only writes values; counters and sums never step back by a
// rounding error.
// Thread contract: one thread at a time per FamilySet (the io thread's scrape cache).
#include <algorithm>
#include <cmath>

#include "family_set.hpp"
#include "text_exposition.hpp"

namespace rankstat {

using prometheus::MetricType;

namespace {

// `value`, unless it is below `last` by no more than floating-point rounding: then `last`. Updates
// `last`. A genuine decrease (larger than rounding) is exported as it is.
double without_rounding_regress(double value, double& last) {
  const double tolerance = 1e-9 * std::max(1.0, std::fabs(last));
  if (value < last && last - value <= tolerance) return last;
  last = value;
  return value;
}

}  // namespace

void FamilySet::render_series(std::string& out, const std::string& name, MetricType type, Series& s,
                              SeriesPart part, exposition::Escaping escaping) {
  constexpr auto kDialect = exposition::Dialect::kPrometheusClient;
  // The heads depend on the name, labels, output type, (histograms) the bounds and (names that are not
  // classic) the escaping scheme only: rendered once per scheme change.
  const bool histogram = type == MetricType::Histogram;
  if (s.head_type != static_cast<int>(type) || (histogram && s.head_bounds != s.bounds) ||
      (!s.head_any_scheme && s.head_escaping != escaping)) {
    s.heads.clear();
    s.head_ends.clear();
    s.head_escaping = escaping;
    s.head_any_scheme = shm::is_classic_metric_name(name) &&
                        std::all_of(s.labels.begin(), s.labels.end(),
                                    [](const auto& l) { return shm::is_classic_label_name(l.name); });
    auto mark = [&s] { s.head_ends.push_back(static_cast<std::uint32_t>(s.heads.size())); };
    if (type == MetricType::Gauge || type == MetricType::Counter) {
      exposition::append_head(s.heads, name, {}, s.labels, {}, {}, kDialect, escaping);
      mark();
    } else if (!histogram) {
      exposition::append_head(s.heads, name, "_count", s.labels, {}, {}, kDialect, escaping);
      mark();
      exposition::append_head(s.heads, name, "_sum", s.labels, {}, {}, kDialect, escaping);
      mark();
    } else {
      // prometheus_client's multiprocess order: _sum, then the buckets and _count.
      exposition::append_head(s.heads, name, "_sum", s.labels, {}, {}, kDialect, escaping);
      mark();
      std::string bound;
      for (const double b : s.bounds) {
        bound.clear();
        exposition::append_client_value(bound, b);
        exposition::append_head(s.heads, name, "_bucket", s.labels, "le", bound, kDialect, escaping);
        mark();
      }
      exposition::append_head(s.heads, name, "_bucket", s.labels, "le", "+Inf", kDialect, escaping);
      mark();
      exposition::append_head(s.heads, name, "_count", s.labels, {}, {}, kDialect, escaping);
      mark();
      s.head_bounds = s.bounds;
    }
    s.head_type = static_cast<int>(type);
  }
  std::size_t head = 0;
  auto put_head = [&] {
    const std::uint32_t begin = head == 0 ? 0 : s.head_ends[head - 1];
    out.append(s.heads, begin, s.head_ends[head] - begin);
    ++head;
  };
  auto put_value = [&](double value) {
    exposition::append_client_value(out, value);
    out.push_back('\n');
  };
  switch (type) {
    case MetricType::Gauge:
      put_head();
      put_value(s.value);
      break;
    case MetricType::Counter:
      put_head();
      put_value(without_rounding_regress(s.value, s.exported_total));
      break;
    case MetricType::Summary: {
      std::uint64_t total = 0;
      for (const std::uint64_t c : s.counts) total += c;
      put_head();
      put_value(static_cast<double>(total));
      put_head();
      put_value(without_rounding_regress(s.sum, s.exported_sum));
      break;
    }
    case MetricType::Histogram: {
      if (part != SeriesPart::kHistogramRest) {
        put_head();
        put_value(without_rounding_regress(s.sum, s.exported_sum));
      }
      if (part == SeriesPart::kHistogramSum) break;
      head = 1;
      std::uint64_t cumulative = 0;
      for (const std::uint64_t c : s.counts) {
        cumulative += c;
        put_head();
        put_value(static_cast<double>(cumulative));
      }
      put_head();
      put_value(static_cast<double>(cumulative));
      break;
    }
    default:
      break;
  }
}

void FamilySet::render(std::string& out, std::vector<std::size_t>* family_ends,
                       exposition::Escaping escaping) {
  for (auto fit = families_.begin(); fit != families_.end();) {
    Family& f = fit->second;
    if (f.round != round_) {
      fit = families_.erase(fit);
      ++layout_;
      continue;
    }
    const std::string& name = fit->first;
    const MetricType type = f.type;
    if (f.ordered_stale) {
      f.ordered.clear();
      f.ordered.reserve(f.series.size());
      for (auto& [key, s] : f.series) f.ordered.push_back(&s);
      f.ordered_stale = false;
    }
    bool written = false;
    bool dropped = false;
    // A histogram family is written as prometheus_client's multiprocess collector writes it: every
    // series' _sum first, then each series' buckets and _count.
    const bool histogram = type == MetricType::Histogram;
    for (Series* s : f.ordered) {
      if (s->round != round_) {
        dropped = true;
        continue;
      }
      if (s->has_value) {
        if (!written) {
          exposition::append_family_header(out, name, f.help, type, exposition::Dialect::kPrometheusClient,
                                           escaping);
        }
        written = true;
        render_series(out, name, type, *s, histogram ? SeriesPart::kHistogramSum : SeriesPart::kAll,
                      escaping);
      }
    }
    if (histogram) {
      for (Series* s : f.ordered) {
        if (s->round == round_ && s->has_value)
          render_series(out, name, type, *s, SeriesPart::kHistogramRest, escaping);
      }
    }
    if (dropped) {
      // Not contributed in this round: dropped now, as a new round would re-create them from scratch.
      for (auto sit = f.series.begin(); sit != f.series.end();) {
        if (sit->second.round != round_) {
          sit = f.series.erase(sit);
          ++layout_;
        } else {
          ++sit;
        }
      }
      f.ordered_stale = true;
    }
    if (written && family_ends != nullptr) family_ends->push_back(out.size());
    ++fit;
  }
  for (auto it = slots_.begin(); it != slots_.end();) {
    it = it->second.round == round_ ? std::next(it) : slots_.erase(it);
  }
  ++round_;
  conflicts_ = 0;
  collisions_ = 0;
  unexposable_ = 0;
  shadowed_constant_labels_ = 0;
}

}  // namespace rankstat
