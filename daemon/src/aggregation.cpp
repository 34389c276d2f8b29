#include "aggregation.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <iterator>
#include <limits>

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

// Replaces or appends `name`'s value: a series label overrides an identity label of the same name
// (e.g. priority="3" over the identity's priority="").
void set_label(Labels& labels, const std::string& name, const std::string& value) {
  for (auto& l : labels) {
    if (l.name == name) {
      l.value = value;
      return;
    }
  }
  labels.push_back({name, value});
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
                              SeriesPart part) {
  constexpr auto kDialect = exposition::Dialect::kPrometheusClient;
  // The heads depend on the name, labels, output type and (histograms) the bounds only: rendered once.
  const bool histogram = type == MetricType::Histogram;
  if (s.head_type != static_cast<int>(type) || (histogram && s.head_bounds != s.bounds)) {
    s.heads.clear();
    s.head_ends.clear();
    auto mark = [&s] { s.head_ends.push_back(static_cast<std::uint32_t>(s.heads.size())); };
    if (type == MetricType::Gauge || type == MetricType::Counter) {
      exposition::append_head(s.heads, name, {}, s.labels, {}, {}, kDialect);
      mark();
    } else if (!histogram) {
      exposition::append_head(s.heads, name, "_count", s.labels, {}, {}, kDialect);
      mark();
      exposition::append_head(s.heads, name, "_sum", s.labels, {}, {}, kDialect);
      mark();
    } else {
      // prometheus_client's multiprocess order: _sum, then the buckets and _count.
      exposition::append_head(s.heads, name, "_sum", s.labels, {}, {}, kDialect);
      mark();
      std::string bound;
      for (const double b : s.bounds) {
        bound.clear();
        exposition::append_client_value(bound, b);
        exposition::append_head(s.heads, name, "_bucket", s.labels, "le", bound, kDialect);
        mark();
      }
      exposition::append_head(s.heads, name, "_bucket", s.labels, "le", "+Inf", kDialect);
      mark();
      exposition::append_head(s.heads, name, "_count", s.labels, {}, {}, kDialect);
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

void FamilySet::render(std::string& out, std::vector<std::size_t>* family_ends) {
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
          exposition::append_family_header(out, name, f.help, type, exposition::Dialect::kPrometheusClient);
        written = true;
        render_series(out, name, type, *s, histogram ? SeriesPart::kHistogramSum : SeriesPart::kAll);
      }
    }
    if (histogram) {
      for (Series* s : f.ordered) {
        if (s->round == round_ && s->has_value)
          render_series(out, name, type, *s, SeriesPart::kHistogramRest);
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

std::string constant_label_refusal(std::string_view name, std::string_view instance_label) {
  const std::string text(name);
  if (name.starts_with("__")) return "'" + text + "' is reserved (labels starting with __ are Prometheus's)";
  if (!shm::is_valid_label_name(text)) return "'" + text + "' is not a valid Prometheus label name";
  for (const std::string_view added : {"le", "quantile", "pid", "gt"}) {
    if (name == added)
      return "'" + text + "' is reserved: the exposition or a gauge mode adds it to engine series";
  }
  for (const std::string_view scrape : {"job", "instance"}) {
    if (name == scrape) {
      return "'" + text + "' is set by Prometheus at scrape time (it would become exported_" + text +
             "); to export the engine instance id, use --label.instance=LABEL";
    }
  }
  // The labels identity_labels() sets below.
  for (const std::string_view engine : kIdentityLabelNames) {
    if (name == engine)
      return "'" + text + "' collides with the engine label of that name on per-rank series";
  }
  if (!instance_label.empty() && name == instance_label) {
    return "'" + text +
           "' collides with --label.instance, which names the label carrying the engine instance id";
  }
  return {};
}

Labels identity_labels(const shm::SegmentHeader& h, const std::string& instance_label) {
  Labels labels;
  for_each_identity_label(h, [&](std::string name, std::string value) {
    labels.push_back({std::move(name), std::move(value)});
  });
  if (auto extra = shm::decode_label_pairs(h.extra_labels, sizeof h.extra_labels)) {
    for (auto& [name, value] : *extra) set_label(labels, name, value);
  }
  if (!instance_label.empty()) set_label(labels, instance_label, h.instance);
  return labels;
}

Labels series_labels(const Labels& identity, const SeriesState& series) {
  const bool own_labels_only = (series.info.flags & shm::kSeriesWithoutIdentityLabels) != 0;
  Labels labels = own_labels_only ? Labels{} : identity;
  for (const auto& [name, value] : series.info.labels) set_label(labels, name, value);
  return labels;
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

// What a generation adds to the sums, one definition for the scrape (collect_cumulative,
// collect_integrals) and for what folding a generation into the retired totals, or checkpointing it, keeps
// (cumulative_totals): the two can never disagree on which series a generation contributed.
//
// The series of `s` the exposition takes, as visit(position, series). A series declared with its own
// labels only came from the engine's own metric code, which already decided which rank reports it; the
// engine-level rule applies to series labelled by the segment.
template <typename Visit>
void for_each_exported_series(const RankSegment& s, bool engine_rule_passed, Visit&& visit) {
  const std::vector<SeriesState>& all = s.series();
  for (std::size_t position = 0; position < all.size(); ++position) {
    // A series whose family another generation declares otherwise, and wins (SegmentRegistry), is left
    // out of everything: the scrape, the retired totals, the checkpoints.
    if (s.series_left_out(position)) continue;
    const bool declared = (all[position].info.flags & shm::kSeriesWithoutIdentityLabels) != 0;
    if (declared || engine_rule_passed) visit(position, all[position]);
  }
}

// The integrated gauges of `s` that have a value, under the rule of the gauge they come from, as
// visit(position, gauge, series); `series` is null for a scheduler snapshot field.
template <typename Visit>
void for_each_exported_integral(const RankSegment& s, bool engine_rule_passed, Visit&& visit) {
  const std::vector<IntegratedGauge>& all = s.integrated();
  for (std::size_t position = 0; position < all.size(); ++position) {
    const IntegratedGauge& g = all[position];
    if (!g.track.has_value()) continue;
    const SeriesState* series = g.field == nullptr ? &s.series()[g.series_position] : nullptr;
    if (series != nullptr && s.series_left_out(g.series_position)) continue;
    const bool declared = series != nullptr && (series->info.flags & shm::kSeriesWithoutIdentityLabels) != 0;
    if (declared || engine_rule_passed) visit(position, g, series);
  }
}

bool histogram_complete(const SeriesState& series) {
  return series.value.counts.size() == series.info.bounds.size() + 1;
}

// `folded`: the generation's counters and histograms are in the retired totals (SegmentRegistry::fold);
// only its gauges are taken from it.
void collect_cumulative(const RankSegment& s, const Labels& base, const Contributor& from, bool keep_all_mode,
                        bool engine_rule_passed, bool folded, FamilySet& out,
                        std::vector<FamilySet::Slot>& slots) {
  slots.resize(s.series().size());
  Labels labels;
  for_each_exported_series(s, engine_rule_passed, [&](std::size_t position, const SeriesState& series) {
    if (folded && series.info.kind != shm::SeriesKind::kGauge) return;
    FamilySet::Slot& slot = slots[position];
    // A published series never changes: once its slot is filled, its labels need not be built again.
    const bool known = out.slot_valid(slot, 0);
    if (!known) labels = series_labels(base, series);
    std::string_view help;
    if (!known) help = series.info.help;
    switch (series.info.kind) {
      case shm::SeriesKind::kCounter:
        out.add_counter(series.info.family, help, labels, series.value.value, from, &slot);
        break;
      case shm::SeriesKind::kGauge:
        // prometheus_client: a (live)mostrecent gauge without a timestamped set is absent; the other
        // modes export a child at 0 from the moment it exists.
        if (series.value.set_ns == 0 && (series.info.gauge_mode == shm::GaugeMode::kMostRecent ||
                                         series.info.gauge_mode == shm::GaugeMode::kLiveMostRecent))
          break;
        if (series.info.gauge_mode == shm::GaugeMode::kAll && !keep_all_mode) break;
        out.add_gauge(series.info.family, help, series.info.gauge_mode, labels, series.value.value,
                      series.value.set_ns, from, &slot);
        break;
      case shm::SeriesKind::kHistogram:
      case shm::SeriesKind::kSummary:
        if (!histogram_complete(series)) break;
        out.add_histogram(series.info.family, help, labels, series.info.bounds, series.value.counts,
                          series.value.sum, from, &slot, 0, series.info.kind == shm::SeriesKind::kSummary);
        break;
    }
  });
}

// The integral counter (unless `folded`) and window extrema of every integrated gauge of `s`, with the
// labels and the engine-level rule of the gauge they come from.
void collect_integrals(const RankSegment& s, const Labels& base, const Contributor& from,
                       bool engine_rule_passed, bool folded, const CollectOptions& options, FamilySet& out,
                       std::vector<FamilySet::Slot>& slots) {
  const IntegralSettings& settings = *options.integrals;
  slots.resize(s.integrated().size() * 3);
  Labels labels;
  for_each_exported_integral(
      s, engine_rule_passed, [&](std::size_t position, const IntegratedGauge& g, const SeriesState* series) {
        FamilySet::Slot* slot = &slots[position * 3];
        // Labels and help are only needed to fill a slot; a valid one already designates the series.
        const auto labels_for = [&](const FamilySet::Slot& target) -> const Labels& {
          static const Labels kNone;
          if (out.slot_valid(target, 0)) return kNone;
          if (labels.empty()) labels = series != nullptr ? series_labels(base, *series) : base;
          return labels;
        };
        labels.clear();
        if (!folded) {
          const bool counter_known = out.slot_valid(slot[0], 0);
          out.add_counter(g.integral_name, counter_known ? std::string() : integral_help(g.family),
                          labels_for(slot[0]), g.track.integral(), from, &slot[0]);
        }
        double largest = 0;
        double smallest = 0;
        if (settings.peak_window_ns == 0 ||
            !g.track.window_extrema(options.now_ns, settings.peak_window_ns, largest, smallest))
          return;
        const bool max_known = out.slot_valid(slot[1], 0);
        out.add_gauge(g.window_max_name,
                      max_known ? std::string() : window_help(g.family, true, settings.peak_window_ns),
                      shm::GaugeMode::kMax, labels_for(slot[1]), largest, g.track.integrated_until_ns(), from,
                      &slot[1]);
        const bool min_known = out.slot_valid(slot[2], 0);
        out.add_gauge(g.window_min_name,
                      min_known ? std::string() : window_help(g.family, false, settings.peak_window_ns),
                      shm::GaugeMode::kMin, labels_for(slot[2]), smallest, g.track.integrated_until_ns(),
                      from, &slot[2]);
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
    collect_cumulative(*s, base, from, keep_all_mode, engine_rule_passed, s->folded(), out, slots.cumulative);
    if (options.integrals != nullptr && options.integrals->enabled() && !s->integrated().empty())
      collect_integrals(*s, base, from, engine_rule_passed, s->folded(), options, out, slots.integrals);
  }
}

CumulativeTotals cumulative_totals(const RankSegment& s, const std::string& instance_label,
                                   CumulativeLabels* cache) {
  CumulativeTotals out;
  const bool engine_rule_passed = exports_engine_metrics(s.identity());
  CumulativeLabels local;
  CumulativeLabels& known = cache != nullptr ? *cache : local;
  if (!known.base) known.base = std::make_shared<const Labels>(identity_labels(s.identity(), instance_label));
  const std::shared_ptr<const Labels>& base = known.base;
  // series_labels(), built once per series (its integral has the same labels) and shared with the
  // identity labels when the series adds none.
  known.series.resize(s.series().size());
  const auto labels_of = [&](std::size_t position) {
    std::shared_ptr<const Labels>& labels = known.series[position];
    if (labels) return labels;
    const SeriesState& series = s.series()[position];
    const bool own_only = (series.info.flags & shm::kSeriesWithoutIdentityLabels) != 0;
    labels = !own_only && series.info.labels.empty()
                 ? base
                 : std::make_shared<const Labels>(series_labels(*base, series));
    return labels;
  };
  for_each_exported_series(s, engine_rule_passed, [&](std::size_t position, const SeriesState& series) {
    switch (series.info.kind) {
      case shm::SeriesKind::kCounter:
        out.counters.push_back(
            {series.info.family, series.info.help, labels_of(position), series.value.value});
        break;
      case shm::SeriesKind::kHistogram:
      case shm::SeriesKind::kSummary:
        if (!histogram_complete(series)) break;
        out.histograms.push_back({series.info.family, series.info.help, labels_of(position),
                                  series.info.bounds, series.value.counts, series.value.sum,
                                  series.info.kind == shm::SeriesKind::kSummary});
        break;
      case shm::SeriesKind::kGauge:
        break;
    }
  });
  // Integrals are counters like the others: kept the same way, so they never go backwards.
  for_each_exported_integral(
      s, engine_rule_passed, [&](std::size_t, const IntegratedGauge& g, const SeriesState* series) {
        out.counters.push_back({g.integral_name, integral_help(g.family),
                                series != nullptr ? labels_of(g.series_position) : base, g.track.integral()});
      });
  return out;
}

bool refresh_cumulative_totals(const RankSegment& s, CumulativeTotals& totals, bool& changed) {
  const bool engine_rule_passed = exports_engine_metrics(s.identity());
  std::size_t counter = 0;
  std::size_t histogram = 0;
  bool same = true;
  // The same walk as cumulative_totals(): series counters and histograms in series order, then integrals.
  for_each_exported_series(s, engine_rule_passed, [&](std::size_t, const SeriesState& series) {
    if (!same) return;
    switch (series.info.kind) {
      case shm::SeriesKind::kCounter: {
        if (counter >= totals.counters.size() || totals.counters[counter].family != series.info.family) {
          same = false;
          return;
        }
        double& value = totals.counters[counter++].value;
        if (value != series.value.value) {
          value = series.value.value;
          changed = true;
        }
        break;
      }
      case shm::SeriesKind::kHistogram:
      case shm::SeriesKind::kSummary: {
        if (!histogram_complete(series)) break;
        if (histogram >= totals.histograms.size() ||
            totals.histograms[histogram].family != series.info.family ||
            totals.histograms[histogram].counts.size() != series.value.counts.size()) {
          same = false;
          return;
        }
        CumulativeTotals::Histogram& h = totals.histograms[histogram++];
        if (h.sum != series.value.sum || h.counts != series.value.counts) {
          h.sum = series.value.sum;
          std::copy(series.value.counts.begin(), series.value.counts.end(), h.counts.begin());
          changed = true;
        }
        break;
      }
      case shm::SeriesKind::kGauge:
        break;
    }
  });
  for_each_exported_integral(
      s, engine_rule_passed, [&](std::size_t, const IntegratedGauge& g, const SeriesState*) {
        if (!same) return;
        if (counter >= totals.counters.size() || totals.counters[counter].family != g.integral_name) {
          same = false;
          return;
        }
        double& value = totals.counters[counter++].value;
        if (value != g.track.integral()) {
          value = g.track.integral();
          changed = true;
        }
      });
  return same && counter == totals.counters.size() && histogram == totals.histograms.size();
}

}  // namespace rankstat
