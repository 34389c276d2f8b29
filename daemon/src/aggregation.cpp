#include "aggregation.hpp"

#include <algorithm>
#include <cstring>
#include <limits>

#include "engine_catalog.hpp"
#include "rankstat/shmproto/scheduler_snapshot.hpp"

namespace rankstat {
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

bool is_per_process(shm::GaugeMode mode) { return mode == shm::GaugeMode::kAll || mode == shm::GaugeMode::kLiveAll; }

// A unique, order-preserving key for a label set (\x1f and \x1e never appear in names; values may
// contain them only in pathological cases, which then at worst merge two series).
std::string label_key(const Labels& labels) {
  std::string key;
  for (const auto& l : labels) {
    key.append(l.name).push_back('\x1f');
    key.append(l.value).push_back('\x1e');
  }
  return key;
}

std::string format_priority(const SeenPriority& p) { return p.is_none ? "None" : std::to_string(p.priority); }

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

// Fields SGLang now exports as histograms (fed per transfer), not as snapshot gauges.
bool is_histogram_only_field(std::string_view field) {
  return field == "kv_transfer_speed_gb_s" || field == "kv_transfer_latency_ms";
}

}  // namespace

FamilySet::Family* FamilySet::family_for(const std::string& name, std::string_view help, MetricType type,
                                         shm::GaugeMode mode) {
  auto [it, inserted] = families_.try_emplace(name);
  Family& f = it->second;
  if (inserted) {
    f.type = type;
    f.mode = mode;
    f.help = std::string(help);
    return &f;
  }
  if (f.type != type || (type == MetricType::Gauge && f.mode != mode)) {
    ++conflicts_;
    return nullptr;
  }
  return &f;
}

void FamilySet::add_gauge(const std::string& name, std::string_view help, shm::GaugeMode mode,
                          const Labels& labels, double value, std::uint64_t timestamp_ns, const Contributor& from) {
  if (is_live_only(mode) && !from.live) return;
  Family* f = family_for(name, help, MetricType::Gauge, mode);
  if (f == nullptr) return;
  Labels full = labels;
  if (is_per_process(mode)) full.push_back({"pid", std::to_string(from.pid)});
  auto [it, inserted] = f->series.try_emplace(label_key(full));
  Series& s = it->second;
  if (inserted) {
    s.labels = std::move(full);
    s.value = value;
    s.has_value = true;
    s.timestamp_ns = timestamp_ns;
    s.created_ns = from.created_ns;
    s.segment_name = std::string(from.segment_name);
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
      const bool newer = timestamp_ns > s.timestamp_ns ||
                         (timestamp_ns == s.timestamp_ns &&
                          (from.created_ns > s.created_ns ||
                           (from.created_ns == s.created_ns && from.segment_name < s.segment_name)));
      if (newer) {
        s.value = value;
        s.timestamp_ns = timestamp_ns;
        s.created_ns = from.created_ns;
        s.segment_name = std::string(from.segment_name);
      }
      break;
    }
  }
}

void FamilySet::add_counter(const std::string& name, std::string_view help, const Labels& labels, double value) {
  Family* f = family_for(name, help, MetricType::Counter, shm::GaugeMode::kSum);
  if (f == nullptr) return;
  auto [it, inserted] = f->series.try_emplace(label_key(labels));
  if (inserted) it->second.labels = labels;
  it->second.value += value;
  it->second.has_value = true;
}

void FamilySet::add_histogram(const std::string& name, std::string_view help, const Labels& labels,
                              const std::vector<double>& bounds, const std::vector<std::uint64_t>& counts,
                              double sum) {
  Family* f = family_for(name, help, MetricType::Histogram, shm::GaugeMode::kSum);
  if (f == nullptr || counts.size() != bounds.size() + 1) return;
  auto [it, inserted] = f->series.try_emplace(label_key(labels));
  Series& s = it->second;
  if (inserted) {
    s.labels = labels;
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
    prometheus::MetricFamily family;
    family.name = name;
    family.help = f.help;
    family.type = f.type;
    family.metric.reserve(f.series.size());
    for (auto& [key, s] : f.series) {
      if (!s.has_value) continue;
      prometheus::ClientMetric m;
      m.label = std::move(s.labels);
      switch (f.type) {
        case MetricType::Gauge:
          m.gauge.value = s.value;
          break;
        case MetricType::Counter:
          m.counter.value = s.value;
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
  return out;
}

Labels identity_labels(const shm::SegmentHeader& h) {
  Labels labels;
  labels.push_back({"model_name", h.model_name});
  labels.push_back({"engine_type", h.engine_type});
  const bool scheduler = h.role == static_cast<std::uint32_t>(shm::Role::kScheduler);
  if (scheduler) {
    labels.push_back({"tp_rank", std::to_string(h.tp_rank)});
    labels.push_back({"pp_rank", std::to_string(h.pp_rank)});
    labels.push_back({"moe_ep_rank", std::to_string(h.moe_ep_rank)});
  }
  if ((h.flags & shm::kFlagPriorityScheduling) != 0) labels.push_back({"priority", ""});
  if (scheduler && h.dp_rank != shm::kRankUnset) labels.push_back({"dp_rank", std::to_string(h.dp_rank)});
  if (auto extra = shm::decode_label_pairs(h.extra_labels, sizeof h.extra_labels)) {
    for (auto& [name, value] : *extra) set_label(labels, name, value);
  }
  return labels;
}

bool exports_engine_metrics(const shm::SegmentHeader& h) {
  if (h.role != static_cast<std::uint32_t>(shm::Role::kScheduler)) return true;
  return h.attn_tp_rank == 0 || (h.flags & shm::kFlagAllSchedulersMetrics) != 0;
}

shm::GaugeMode snapshot_field_mode(std::string_view field) {
  // SGLang declares these two without a multiprocess_mode, so prometheus_client's default "all" applies.
  if (field == "num_retracted_reqs" || field == "num_paused_reqs") return shm::GaugeMode::kAll;
  return shm::GaugeMode::kMostRecent;
}

namespace {

std::string_view queue_field_name(std::uint8_t queue) { return shm::kQueueTotalField[queue]; }

void collect_snapshot(const RankSegment& s, const Labels& base, const Contributor& from, FamilySet& out) {
  const SchedulerView& view = s.scheduler();
  if (!view.present) return;
  const auto* bytes = reinterpret_cast<const std::uint8_t*>(&view.fixed);
  const bool priorities_on = (s.identity().flags & shm::kFlagPriorityScheduling) != 0;
  std::string name;
  for (const shm::ScalarField& field : shm::kSchedulerScalarFields) {
    if (field.group != 0 && (view.fixed.groups & field.group) == 0) continue;
    if (is_histogram_only_field(field.name)) continue;
    double value = 0;
    if (field.type == shm::FieldType::kI64) {
      std::int64_t v = 0;
      std::memcpy(&v, bytes + field.offset, sizeof v);
      value = static_cast<double>(v);
    } else {
      std::memcpy(&value, bytes + field.offset, sizeof value);
    }
    name.assign("sglang:").append(field.name);
    const shm::GaugeMode mode = snapshot_field_mode(field.name);
    const std::string_view help = engine_help(name);
    out.add_gauge(name, help, mode, base, value, view.timestamp_ns, from);
    if (!priorities_on) continue;
    // Per-priority breakdown: every priority seen so far on this queue, 0 when absent now.
    for (const SeenPriority& seen : s.seen_priorities()) {
      if (queue_field_name(seen.queue) != field.name) continue;
      std::int64_t count = 0;
      for (const shm::PriorityCount& e : view.priorities) {
        const bool none = (e.flags & shm::kPriorityIsNone) != 0;
        if (e.queue == seen.queue && none == seen.is_none && (none || e.priority == seen.priority)) count += e.count;
      }
      Labels labels = base;
      set_label(labels, "priority", format_priority(seen));
      out.add_gauge(name, help, mode, labels, static_cast<double>(count), view.timestamp_ns, from);
    }
  }
}

void collect_cumulative(const RankSegment& s, const Labels& base, const Contributor& from, FamilySet& out) {
  for (const SeriesState& series : s.series()) {
    Labels labels = (series.info.flags & shm::kSeriesWithoutIdentityLabels) != 0 ? Labels{} : base;
    for (const auto& [name, value] : series.info.labels) set_label(labels, name, value);
    const std::string_view help = engine_help(series.info.family);
    switch (series.info.kind) {
      case shm::SeriesKind::kCounter:
        out.add_counter(series.info.family, help, labels, series.value.value);
        break;
      case shm::SeriesKind::kGauge:
        if (series.value.set_ns == 0) break;  // never set: absent, as prometheus_client does
        out.add_gauge(series.info.family, help, series.info.gauge_mode, labels, series.value.value,
                      series.value.set_ns, from);
        break;
      case shm::SeriesKind::kHistogram:
        if (series.value.counts.size() != series.info.bounds.size() + 1) break;
        out.add_histogram(series.info.family, help, labels, series.info.bounds, series.value.counts,
                          series.value.sum);
        break;
    }
  }
}

}  // namespace

void collect_engine_metrics(const std::vector<const RankSegment*>& generations, FamilySet& out) {
  for (const RankSegment* s : generations) {
    if (!exports_engine_metrics(s->identity())) continue;
    const Labels base = identity_labels(s->identity());
    Contributor from;
    from.live = is_live(s->state());
    from.pid = s->identity().pid;
    from.created_ns = s->identity().created_monotonic_ns;
    from.segment_name = s->name();
    collect_snapshot(*s, base, from, out);
    collect_cumulative(*s, base, from, out);
  }
}

}  // namespace rankstat
