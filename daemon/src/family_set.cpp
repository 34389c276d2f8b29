// The family merge (family_set.hpp): where each contribution goes (family, series, slot), by what rule
// its value merges with the others (gauge modes, counter and histogram sums, instance ownership), and
// which labels can be exposed at all. finish() hands the merged families to prometheus-cpp.
// Thread contract: one thread at a time per FamilySet.
#include "family_set.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <iterator>
#include <limits>

#include "rankstat/shmproto/naming.hpp"
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

void FamilySet::set_constant_labels(Labels labels) {
  std::sort(labels.begin(), labels.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  constant_labels_ = std::move(labels);
  // Every series key and pre-rendered head includes the constant labels: start over.
  families_.clear();
  slots_.clear();
  ++layout_;
}

}  // namespace rankstat
