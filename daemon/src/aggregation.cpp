#include "aggregation.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <iterator>
#include <limits>

#include "generation_contributions.hpp"
#include "rankstat/shmproto/naming.hpp"
#include "rankstat/shmproto/scheduler_snapshot.hpp"
#include "text_exposition.hpp"

namespace rankstat {

FamilyDeclaration FamilyDeclaration::of(const shm::SeriesInfo& info) {
  FamilyDeclaration d;
  d.kind = info.kind;
  if (info.kind == shm::SeriesKind::kGauge) d.mode = info.gauge_mode;
  if (info.kind == shm::SeriesKind::kHistogram) d.bounds = info.bounds;
  return d;
}

std::string describe_declaration(const FamilyDeclaration& declaration) {
  switch (declaration.kind) {
    case shm::SeriesKind::kCounter:
      return "counter";
    case shm::SeriesKind::kGauge:
      return "gauge (multiprocess_mode " + std::string(shm::gauge_mode_name(declaration.mode)) + ")";
    case shm::SeriesKind::kSummary:
      return "summary";
    case shm::SeriesKind::kHistogram: {
      std::string out = "histogram with buckets [";
      for (const double bound : declaration.bounds) {
        exposition::append_client_value(out, bound);
        out += ", ";
      }
      return out + "+Inf]";
    }
  }
  return "unknown kind " + std::to_string(static_cast<int>(declaration.kind));
}

namespace {

using prometheus::MetricType;

bool is_live_only(shm::GaugeMode mode) {
  switch (mode) {
    case shm::GaugeMode::kLiveAll:
    case shm::GaugeMode::kLiveSum:
    case shm::GaugeMode::kLiveMin:
    case shm::GaugeMode::kLiveMax:
    case shm::GaugeMode::kLiveMostRecent:
      return true;
    default:
      return false;
  }
}

bool is_per_process(shm::GaugeMode mode) {
  return mode == shm::GaugeMode::kAll || mode == shm::GaugeMode::kLiveAll;
}

// A unique, order-preserving key for a label set (\x1f and \x1e never appear in names; values may
// contain them only in pathological cases, which then at worst merge two series). `pid` non-empty adds
// the label pid="<pid>" last, as the per-process gauge modes do.
void label_key(std::string& key, const Labels& labels, std::string_view pid) {
  key.clear();
  for (const auto& l : labels) {
    key.append(l.name).push_back('\x1f');
    key.append(l.value).push_back('\x1e');
  }
  if (!pid.empty()) key.append("pid\x1f").append(pid).push_back('\x1e');
}

}  // namespace

FamilySet::Family* FamilySet::family_for(const std::string& name, std::string_view help, MetricType type,
                                         shm::GaugeMode mode) {
  auto [it, inserted] = families_.try_emplace(name);
  it->second.name = &it->first;
  return touch_family(it->second, inserted, help, type, mode, false);
}

FamilySet::Family* FamilySet::touch_family(Family& f, bool inserted, std::string_view help, MetricType type,
                                           shm::GaugeMode mode, bool keep_help) {
  // A family met for the first time in this round is (re)initialised by its first contributor, exactly
  // as a new one: type, mode and help come from it.
  if (inserted || f.round != round_) {
    f.type = type;
    f.mode = mode;
    if (!keep_help && f.help != help) f.help = std::string(help);
    f.round = round_;
    return &f;
  }
  if (f.type != type || (type == MetricType::Gauge && f.mode != mode)) {
    ++conflicts_;
    return nullptr;
  }
  return &f;
}

FamilySet::Series* FamilySet::series_for(Family& family, const Labels& labels, std::string_view pid_label,
                                         const Contributor& from, bool& inserted) {
  // Labels are kept sorted by name, pid included, as prometheus_client writes them: the key is then the
  // same whatever order a contributor gave them in.
  sorted_scratch_ = labels;
  if (!pid_label.empty()) sorted_scratch_.push_back({"pid", std::string(pid_label)});
  bool shadowed = false;
  const std::size_t own_labels = sorted_scratch_.size();
  for (const auto& constant : constant_labels_) {
    const auto own_end = sorted_scratch_.begin() + static_cast<std::ptrdiff_t>(own_labels);
    if (std::any_of(sorted_scratch_.begin(), own_end,
                    [&](const auto& l) { return l.name == constant.name; })) {
      shadowed = true;
      continue;
    }
    sorted_scratch_.push_back(constant);
  }
  std::sort(sorted_scratch_.begin(), sorted_scratch_.end(),
            [](const auto& a, const auto& b) { return a.name < b.name; });
  label_key(key_scratch_, sorted_scratch_, {});
  auto [it, fresh] = family.series.try_emplace(key_scratch_);
  if (fresh) family.ordered_stale = true;
  Series& s = it->second;
  if (fresh) {
    s.labels = sorted_scratch_;
    s.shadows_constant_label = shadowed;
  }
  return touch_series(s, fresh, from, inserted);
}

FamilySet::Series* FamilySet::touch_series(Series& s, bool fresh, const Contributor& from, bool& inserted) {
  // A series met for the first time in this round starts over, exactly as a new one.
  inserted = fresh || s.round != round_;
  if (inserted) {
    s.round = round_;
    s.value = 0;
    s.has_value = false;
    s.timestamp_ns = 0;
    s.created_ns = 0;
    s.segment_name.clear();
    s.sum = 0;
    s.instance.assign(from.instance);
    if (s.shadows_constant_label) ++shadowed_constant_labels_;
    return &s;
  }
  if (!from.instance.empty() && !s.instance.empty() && s.instance != from.instance) {
    ++collisions_;
    return nullptr;
  }
  if (s.instance.empty()) s.instance.assign(from.instance);
  return &s;
}

namespace {

// Whether a sample with these labels can be written as text format that Prometheus accepts: label names
// valid and not reserved ("__" prefix), values strict UTF-8, no name twice, no `le` on a histogram or
// `quantile` on a summary (the exposition adds its own), no `pid` where the mode adds one. The reader
// already refuses bad series labels; this is the last line for labels from the segment header
// (model_name, engine_type, extra labels, the instance), retired totals and any other path, so that one
// rank's bad bytes cost its own samples and never the whole scrape.
bool exposable(const Labels& labels, MetricType type, std::string_view pid_label) {
  for (std::size_t i = 0; i < labels.size(); ++i) {
    const std::string& name = labels[i].name;
    if (!shm::is_valid_label_name(name) || !shm::is_valid_utf8(labels[i].value)) return false;
    if ((type == MetricType::Histogram && name == "le") ||
        (type == MetricType::Summary && name == "quantile") || (!pid_label.empty() && name == "pid"))
      return false;
    for (std::size_t j = 0; j < i; ++j) {
      if (labels[j].name == name) return false;
    }
  }
  return true;
}

}  // namespace

FamilySet::Series* FamilySet::resolve(Slot* slot, std::uint64_t tag, const std::string& name,
                                      std::string_view help, MetricType type, shm::GaugeMode mode,
                                      const Labels& labels, std::string_view pid_label,
                                      const Contributor& from, bool& inserted) {
  if (slot != nullptr && slot_valid(*slot, tag)) {
    if (touch_family(*slot->family_, false, help, type, mode, true) == nullptr) return nullptr;
    return touch_series(*slot->series_, false, from, inserted);
  }
  if (!exposable(labels, type, pid_label)) {
    ++unexposable_;
    return nullptr;
  }
  Family* f = family_for(name, help, type, mode);
  if (f == nullptr) return nullptr;
  Series* s = series_for(*f, labels, pid_label, from, inserted);
  if (s != nullptr && slot != nullptr) {
    slot->family_ = f;
    slot->series_ = s;
    slot->layout_ = layout_;
    slot->tag_ = tag;
  }
  return s;
}

FamilySet::SegmentSlots& FamilySet::slots(std::string_view segment_name, std::uint64_t generation,
                                          std::string_view instance_label) {
  auto it = slots_.find(std::make_tuple(segment_name, generation, instance_label));
  if (it == slots_.end()) {
    it = slots_
             .try_emplace(std::make_tuple(std::string(segment_name), generation, std::string(instance_label)))
             .first;
  }
  it->second.round = round_;
  return it->second;
}

void FamilySet::add_gauge(const std::string& name, std::string_view help, shm::GaugeMode mode,
                          const Labels& labels, double value, std::uint64_t timestamp_ns,
                          const Contributor& from, Slot* slot, std::uint64_t tag) {
  if (is_live_only(mode) && !from.live) return;
  char pid_text[16] = {};
  std::string_view pid_label;
  if (is_per_process(mode)) {
    const auto r = std::to_chars(pid_text, pid_text + sizeof pid_text, from.pid);
    pid_label = std::string_view(pid_text, static_cast<std::size_t>(r.ptr - pid_text));
  }
  bool inserted = false;
  Series* found = resolve(slot, tag, name, help, MetricType::Gauge, mode, labels, pid_label, from, inserted);
  if (found == nullptr) return;
  Series& s = *found;
  if (inserted) {
    s.value = value;
    s.has_value = true;
    s.timestamp_ns = timestamp_ns;
    s.created_ns = from.created_ns;
    s.segment_name.assign(from.segment_name);
    return;
  }
  switch (mode) {
    case shm::GaugeMode::kAll:
    case shm::GaugeMode::kLiveAll:
      // Two generations of one pid cannot coexist; if they do, the newer record wins.
      if (timestamp_ns >= s.timestamp_ns) s.value = value;
      break;
    case shm::GaugeMode::kSum:
    case shm::GaugeMode::kLiveSum:
      s.value += value;
      break;
    case shm::GaugeMode::kMin:
    case shm::GaugeMode::kLiveMin:
      s.value = std::min(s.value, value);
      break;
    case shm::GaugeMode::kMax:
    case shm::GaugeMode::kLiveMax:
      s.value = std::max(s.value, value);
      break;
    case shm::GaugeMode::kMostRecent:
    case shm::GaugeMode::kLiveMostRecent: {
      // Equal nanosecond stamps come from sets that no process ordered: any deterministic choice is
      // right, and this one never depends on the order segments are visited.
      const bool newer = timestamp_ns > s.timestamp_ns ||
                         (timestamp_ns == s.timestamp_ns &&
                          (from.created_ns > s.created_ns ||
                           (from.created_ns == s.created_ns && from.segment_name < s.segment_name)));
      if (newer) {
        s.value = value;
        s.timestamp_ns = timestamp_ns;
        s.created_ns = from.created_ns;
        s.segment_name.assign(from.segment_name);
      }
      break;
    }
  }
}

void FamilySet::add_counter(const std::string& name, std::string_view help, const Labels& labels,
                            double value, const Contributor& from, Slot* slot, std::uint64_t tag) {
  bool inserted = false;
  Series* s =
      resolve(slot, tag, name, help, MetricType::Counter, shm::GaugeMode::kSum, labels, {}, from, inserted);
  if (s == nullptr) return;
  s->value += value;
  s->has_value = true;
}

void FamilySet::add_histogram(const std::string& name, std::string_view help, const Labels& labels,
                              const std::vector<double>& bounds, const std::vector<std::uint64_t>& counts,
                              double sum, const Contributor& from, Slot* slot, std::uint64_t tag,
                              bool summary) {
  const MetricType type = summary ? MetricType::Summary : MetricType::Histogram;
  if (counts.size() != bounds.size() + 1 || (summary && !bounds.empty())) {
    // Still takes part in the family's type check, as a contribution does.
    if (slot != nullptr && slot_valid(*slot, tag)) {
      touch_family(*slot->family_, false, help, type, shm::GaugeMode::kSum, true);
    } else {
      family_for(name, help, type, shm::GaugeMode::kSum);
    }
    return;
  }
  bool inserted = false;
  Series* found = resolve(slot, tag, name, help, type, shm::GaugeMode::kSum, labels, {}, from, inserted);
  if (found == nullptr) return;
  Series& s = *found;
  if (inserted) {
    s.bounds = bounds;
    s.counts.assign(counts.size(), 0);
  } else if (s.bounds != bounds) {
    ++conflicts_;  // same series, different buckets: cannot be summed
    return;
  }
  for (std::size_t i = 0; i < counts.size(); ++i) s.counts[i] += counts[i];
  s.sum += sum;
  s.has_value = true;
}

std::vector<prometheus::MetricFamily> FamilySet::finish() {
  std::vector<prometheus::MetricFamily> out;
  out.reserve(families_.size());
  for (auto& [name, f] : families_) {
    if (f.round != round_) continue;  // left from an earlier round of render()
    prometheus::MetricFamily family;
    family.name = name;
    family.help = f.help;
    family.type = f.type;
    family.metric.reserve(f.series.size());
    for (auto& [key, s] : f.series) {
      if (!s.has_value || s.round != round_) continue;
      prometheus::ClientMetric m;
      m.label = std::move(s.labels);
      switch (f.type) {
        case MetricType::Gauge:
          m.gauge.value = s.value;
          break;
        case MetricType::Counter:
          m.counter.value = s.value;
          break;
        case MetricType::Summary:
          for (const std::uint64_t c : s.counts) m.summary.sample_count += c;
          m.summary.sample_sum = s.sum;
          break;
        case MetricType::Histogram: {
          std::uint64_t cumulative = 0;
          for (std::size_t i = 0; i < s.bounds.size(); ++i) {
            cumulative += s.counts[i];
            m.histogram.bucket.push_back({cumulative, s.bounds[i]});
          }
          cumulative += s.counts.back();
          m.histogram.bucket.push_back({cumulative, std::numeric_limits<double>::infinity()});
          m.histogram.sample_count = cumulative;
          m.histogram.sample_sum = s.sum;
          break;
        }
        default:
          break;
      }
      family.metric.push_back(std::move(m));
    }
    if (!family.metric.empty()) out.push_back(std::move(family));
  }
  families_.clear();
  slots_.clear();
  ++layout_;
  ++round_;
  return out;
}

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
        if (!written)
          exposition::append_family_header(out, name, f.help, type, exposition::Dialect::kPrometheusClient,
                                           escaping);
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

void FamilySet::set_constant_labels(Labels labels) {
  std::sort(labels.begin(), labels.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  constant_labels_ = std::move(labels);
  // Every series key and pre-rendered head includes the constant labels: start over.
  families_.clear();
  slots_.clear();
  ++layout_;
}

std::string snapshot_family_name(const shm::ScalarField& field) {
  return std::string(shm::kSnapshotFamilyPrefix).append(field.name);
}

bool snapshot_field_gauge_mode(const shm::ScalarField& field, shm::GaugeMode& mode) {
  switch (field.exported) {
    case shm::FieldExport::kMostRecentGauge:
      mode = shm::GaugeMode::kMostRecent;
      return true;
    case shm::FieldExport::kPerProcessGauge:
      mode = shm::GaugeMode::kAll;
      return true;
    case shm::FieldExport::kNotExported:
      break;
  }
  return false;
}

namespace {

std::string_view queue_field_name(std::uint8_t queue) {
  return shm::kQueueTotalField[queue];
}

// SGLang's routing-key GaugeHistograms: a mostrecent gauge per bin with gt/le labels
// (routing_key_bin_labels, engine_rules.hpp), sent in the snapshot as per-bin key counts.
void collect_routing_key_bins(const SchedulerView& view, const Labels& base, const Contributor& from,
                              FamilySet& out, std::vector<FamilySet::Slot>& slots) {
  if ((view.fixed.groups & shm::kGroupRoutingKeys) == 0) return;
  const struct {
    const shm::RoutingKeyFamily& family;
    const std::uint64_t* bins;
  } histograms[] = {{shm::kRoutingKeyFamilies[0], view.fixed.routing_key_running_req_counts},
                    {shm::kRoutingKeyFamilies[1], view.fixed.routing_key_all_req_counts}};
  slots.resize(std::size(histograms) * shm::kRoutingKeyBins);
  std::size_t index = 0;
  for (const auto& h : histograms) {
    const std::string name = h.family.name;
    for (std::size_t i = 0; i < shm::kRoutingKeyBins; ++i) {
      FamilySet::Slot& slot = slots[index++];
      Labels labels;
      std::string_view help;
      if (!out.slot_valid(slot, 0)) {  // else the slot knows the series: no labels to build
        labels = base;
        auto [gt, le] = routing_key_bin_labels(i);
        labels.push_back({"gt", std::move(gt)});
        labels.push_back({"le", std::move(le)});
        help = h.family.help;
      }
      out.add_gauge(name, help, shm::GaugeMode::kMostRecent, labels, static_cast<double>(h.bins[i]),
                    view.timestamp_ns, from, &slot);
    }
  }
}

void collect_snapshot(const RankSegment& s, const Labels& base, const Contributor& from, bool keep_all_mode,
                      FamilySet& out, FamilySet::SegmentSlots& slots) {
  const SchedulerView& view = s.scheduler();
  if (!view.present) return;
  const bool priorities_on = (s.identity().flags & shm::kFlagPriorityScheduling) != 0;
  std::string name;
  slots.snapshot.resize(std::size(shm::kSchedulerScalarFields));
  std::size_t field_index = 0;
  std::size_t priority_index = 0;
  for (const shm::ScalarField& field : shm::kSchedulerScalarFields) {
    FamilySet::Slot& slot = slots.snapshot[field_index++];
    if (!shm::field_present(view.fixed, field)) continue;
    shm::GaugeMode mode = shm::GaugeMode::kMostRecent;
    if (!snapshot_field_gauge_mode(field, mode)) continue;
    const double value = shm::read_scalar(view.fixed, field).as_double();
    name.assign(shm::kSnapshotFamilyPrefix).append(field.name);
    if (mode == shm::GaugeMode::kAll && !keep_all_mode) continue;
    const std::string_view help = out.slot_valid(slot, 0) ? std::string_view() : std::string_view(field.help);
    out.add_gauge(name, help, mode, base, value, view.timestamp_ns, from, &slot);
    if (!priorities_on) continue;
    // Per-priority breakdown: every priority seen so far on this queue, 0 when absent now.
    for (const SeenPriority& seen : s.seen_priorities()) {
      if (queue_field_name(seen.queue) != field.name) continue;
      std::int64_t count = 0;
      for (const shm::PriorityCount& e : view.priorities) {
        const bool none = (e.flags & shm::kPriorityIsNone) != 0;
        if (e.queue == seen.queue && none == seen.is_none && (none || e.priority == seen.priority))
          count += e.count;
      }
      // The slot remembers which priority it held: the set of seen priorities only grows, but in order.
      const std::uint64_t tag = (std::uint64_t{1} << 63) | (std::uint64_t{field_index} << 48) |
                                (std::uint64_t{seen.queue} << 40) | (std::uint64_t{seen.is_none} << 32) |
                                static_cast<std::uint32_t>(seen.priority);
      if (slots.priorities.size() <= priority_index) slots.priorities.resize(priority_index + 1);
      FamilySet::Slot& priority_slot = slots.priorities[priority_index++];
      Labels labels;
      std::string_view priority_help;
      if (!out.slot_valid(priority_slot, tag)) {
        labels = base;
        set_label(labels, "priority", priority_label_value(seen));
        priority_help = field.help;
      }
      out.add_gauge(name, priority_help, mode, labels, static_cast<double>(count), view.timestamp_ns, from,
                    &priority_slot, tag);
    }
  }
  collect_routing_key_bins(view, base, from, out, slots.routing);
}

// Every contribution of `s` but its scheduler snapshot (for_each_contribution, the one definition the
// retired totals and checkpoints use too). A folded generation's counters, histograms, summaries and
// integrals are in the retired totals (SegmentRegistry::fold): only its gauges are taken from it.
void collect_contributions(const RankSegment& s, const Labels& base, const Contributor& from,
                           bool keep_all_mode, const CollectOptions& options, FamilySet& out,
                           FamilySet::SegmentSlots& slots) {
  slots.cumulative.resize(s.series().size());
  slots.integrals.resize(s.integrated().size() * 3);
  ContributionWindow window;
  if (options.integrals != nullptr) window = {options.now_ns, options.integrals->peak_window_ns};
  Labels labels;
  for_each_contribution(s, window, [&](const Contribution& c) {
    if (s.folded() && c.cumulative()) return;
    if (c.kind == shm::SeriesKind::kGauge && c.mode == shm::GaugeMode::kAll && !keep_all_mode) return;
    FamilySet::Slot& slot =
        c.source == Contribution::Source::kSeries ? slots.cumulative[c.slot()] : slots.integrals[c.slot()];
    // A published series never changes: once its slot is filled, neither its labels nor its help are
    // needed again (they are only used to fill a slot).
    const bool known = out.slot_valid(slot, 0);
    std::string help;
    if (!known) {
      labels = c.labels(base);
      help = c.help();
    }
    switch (c.kind) {
      case shm::SeriesKind::kCounter:
        out.add_counter(*c.family, help, labels, c.value, from, &slot);
        break;
      case shm::SeriesKind::kGauge:
        out.add_gauge(*c.family, help, c.mode, labels, c.value, c.timestamp_ns, from, &slot);
        break;
      case shm::SeriesKind::kHistogram:
      case shm::SeriesKind::kSummary:
        out.add_histogram(*c.family, help, labels, c.bounds(), c.counts(), c.sum(), from, &slot, 0,
                          c.summary());
        break;
    }
  });
}

}  // namespace

void collect_engine_metrics(const std::vector<const RankSegment*>& generations, const CollectOptions& options,
                            FamilySet& out) {
  for (const RankSegment* s : generations) {
    const bool engine_rule_passed = exports_engine_metrics(s->identity());
    const Labels base = identity_labels(s->identity(), options.instance_label);
    Contributor from;
    from.live = is_live(s->state());
    from.pid = s->identity().pid;
    from.created_ns = s->identity().created_monotonic_ns;
    from.segment_name = s->name();
    from.instance = s->identity().instance;
    // A dead process's per-pid (`all` mode) series stay for the grace period only: no pile-up.
    const bool keep_all_mode = from.live || options.now_ns < s->state_since_ns() ||
                               options.now_ns - s->state_since_ns() <= options.dead_grace_ns;
    FamilySet::SegmentSlots& slots = out.slots(s->name(), s->identity().generation, options.instance_label);
    if (engine_rule_passed) collect_snapshot(*s, base, from, keep_all_mode, out, slots);
    collect_contributions(*s, base, from, keep_all_mode, options, out, slots);
  }
}

}  // namespace rankstat
