#include "aggregation.hpp"

#include <algorithm>
#include <cstring>
#include <iterator>
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

FamilySet::Series* FamilySet::series_for(Family& family, Labels labels, const Contributor& from, bool& inserted) {
  auto [it, fresh] = family.series.try_emplace(label_key(labels));
  inserted = fresh;
  Series& s = it->second;
  if (fresh) {
    s.labels = std::move(labels);
    s.instance = std::string(from.instance);
    return &s;
  }
  if (!from.instance.empty() && !s.instance.empty() && s.instance != from.instance) {
    ++collisions_;
    return nullptr;
  }
  if (s.instance.empty()) s.instance = std::string(from.instance);
  return &s;
}

void FamilySet::add_gauge(const std::string& name, std::string_view help, shm::GaugeMode mode,
                          const Labels& labels, double value, std::uint64_t timestamp_ns, const Contributor& from) {
  if (is_live_only(mode) && !from.live) return;
  Family* f = family_for(name, help, MetricType::Gauge, mode);
  if (f == nullptr) return;
  Labels full = labels;
  if (is_per_process(mode)) full.push_back({"pid", std::to_string(from.pid)});
  bool inserted = false;
  Series* found = series_for(*f, std::move(full), from, inserted);
  if (found == nullptr) return;
  Series& s = *found;
  if (inserted) {
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

void FamilySet::add_counter(const std::string& name, std::string_view help, const Labels& labels, double value,
                            const Contributor& from) {
  Family* f = family_for(name, help, MetricType::Counter, shm::GaugeMode::kSum);
  if (f == nullptr) return;
  bool inserted = false;
  Series* s = series_for(*f, labels, from, inserted);
  if (s == nullptr) return;
  s->value += value;
  s->has_value = true;
}

void FamilySet::add_histogram(const std::string& name, std::string_view help, const Labels& labels,
                              const std::vector<double>& bounds, const std::vector<std::uint64_t>& counts,
                              double sum, const Contributor& from) {
  Family* f = family_for(name, help, MetricType::Histogram, shm::GaugeMode::kSum);
  if (f == nullptr || counts.size() != bounds.size() + 1) return;
  bool inserted = false;
  Series* found = series_for(*f, labels, from, inserted);
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
    prometheus::MetricFamily family;
    family.name = name;
    family.help = f.help;
    family.type = f.type;
    // Summaries travel as histograms without finite bounds; the catalog says which families they are.
    const bool as_summary = f.type == MetricType::Histogram && engine_family_is_summary(name);
    if (as_summary) family.type = MetricType::Summary;
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
          if (as_summary) {
            for (const std::uint64_t c : s.counts) m.summary.sample_count += c;
            m.summary.sample_sum = s.sum;
            break;
          }
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

Labels identity_labels(const shm::SegmentHeader& h, const std::string& instance_label) {
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
  if (!instance_label.empty()) set_label(labels, instance_label, h.instance);
  return labels;
}

Labels series_labels(const Labels& identity, const SeriesState& series) {
  // The client API has no way to set the flag yet; SGLang's label-less families are known by name.
  const bool own_labels_only = (series.info.flags & shm::kSeriesWithoutIdentityLabels) != 0 ||
                               engine_family_without_identity_labels(series.info.family);
  Labels labels = own_labels_only ? Labels{} : identity;
  for (const auto& [name, value] : series.info.labels) set_label(labels, name, value);
  return labels;
}

bool exports_engine_metrics(const shm::SegmentHeader& h) {
  if (h.role != static_cast<std::uint32_t>(shm::Role::kScheduler)) return true;
  // Newer SGLang (the reference article) also requires attn_cp_rank 0; -1 (unset) counts as 0.
  return (h.attn_tp_rank == 0 && h.attn_cp_rank <= 0) || (h.flags & shm::kFlagAllSchedulersMetrics) != 0;
}

bool exported_as_snapshot_gauge(std::string_view field) {
  // SGLang now feeds these per KV transfer into histograms, not from the scheduler snapshot.
  return field != "kv_transfer_speed_gb_s" && field != "kv_transfer_latency_ms";
}

shm::GaugeMode snapshot_field_mode(std::string_view field) {
  // SGLang declares these two without a multiprocess_mode, so prometheus_client's default "all" applies.
  if (field == "num_retracted_reqs" || field == "num_paused_reqs") return shm::GaugeMode::kAll;
  return shm::GaugeMode::kMostRecent;
}

namespace {

std::string_view queue_field_name(std::uint8_t queue) { return shm::kQueueTotalField[queue]; }

// SGLang's routing-key GaugeHistograms: a mostrecent gauge per bin with gt/le labels ("gt < count <= le",
// bounds printed as SGLang prints its integer bounds), sent in the snapshot as per-bin key counts.
void collect_routing_key_bins(const SchedulerView& view, const Labels& base, const Contributor& from,
                              FamilySet& out) {
  if ((view.fixed.groups & shm::kGroupRoutingKeys) == 0) return;
  const auto bound_text = [](std::size_t i) {
    if (i >= std::size(shm::kRoutingKeyBucketBounds)) return std::string("+Inf");
    const double b = shm::kRoutingKeyBucketBounds[i];
    return b == static_cast<double>(static_cast<std::int64_t>(b)) ? std::to_string(static_cast<std::int64_t>(b))
                                                                  : std::to_string(b);
  };
  const struct {
    const char* family;
    const std::uint64_t* bins;
  } histograms[] = {{"sglang:routing_key_running_req_count", view.fixed.routing_key_running_req_counts},
                    {"sglang:routing_key_all_req_count", view.fixed.routing_key_all_req_counts}};
  for (const auto& h : histograms) {
    const std::string name = h.family;
    for (std::size_t i = 0; i < shm::kRoutingKeyBins; ++i) {
      Labels labels = base;
      labels.push_back({"gt", i == 0 ? std::string("0") : bound_text(i - 1)});
      labels.push_back({"le", bound_text(i)});
      out.add_gauge(name, engine_help(name), shm::GaugeMode::kMostRecent, labels, static_cast<double>(h.bins[i]),
                    view.timestamp_ns, from);
    }
  }
}

void collect_snapshot(const RankSegment& s, const Labels& base, const Contributor& from, bool keep_all_mode,
                      FamilySet& out) {
  const SchedulerView& view = s.scheduler();
  if (!view.present) return;
  const auto* bytes = reinterpret_cast<const std::uint8_t*>(&view.fixed);
  const bool priorities_on = (s.identity().flags & shm::kFlagPriorityScheduling) != 0;
  std::string name;
  for (const shm::ScalarField& field : shm::kSchedulerScalarFields) {
    if (field.group != 0 && (view.fixed.groups & field.group) == 0) continue;
    if (!exported_as_snapshot_gauge(field.name)) continue;
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
    if (mode == shm::GaugeMode::kAll && !keep_all_mode) continue;
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
  collect_routing_key_bins(view, base, from, out);
}

void collect_cumulative(const RankSegment& s, const Labels& base, const Contributor& from, bool keep_all_mode,
                        FamilySet& out) {
  for (const SeriesState& series : s.series()) {
    const Labels labels = series_labels(base, series);
    const std::string_view help = engine_help(series.info.family);
    switch (series.info.kind) {
      case shm::SeriesKind::kCounter:
        out.add_counter(series.info.family, help, labels, series.value.value, from);
        break;
      case shm::SeriesKind::kGauge:
        if (series.value.set_ns == 0) break;  // never set: absent, as prometheus_client does
        if (series.info.gauge_mode == shm::GaugeMode::kAll && !keep_all_mode) break;
        out.add_gauge(series.info.family, help, series.info.gauge_mode, labels, series.value.value,
                      series.value.set_ns, from);
        break;
      case shm::SeriesKind::kHistogram:
        if (series.value.counts.size() != series.info.bounds.size() + 1) break;
        out.add_histogram(series.info.family, help, labels, series.info.bounds, series.value.counts,
                          series.value.sum, from);
        break;
    }
  }
}

}  // namespace

void collect_engine_metrics(const std::vector<const RankSegment*>& generations, const CollectOptions& options,
                            FamilySet& out) {
  for (const RankSegment* s : generations) {
    if (!exports_engine_metrics(s->identity()) || s->schema_conflict()) continue;
    const Labels base = identity_labels(s->identity(), options.instance_label);
    Contributor from;
    from.live = is_live(s->state());
    from.pid = s->identity().pid;
    from.created_ns = s->identity().created_monotonic_ns;
    from.segment_name = s->name();
    from.instance = s->identity().instance;
    // A dead process's per-pid (`all` mode) series stay for the grace period only: no pile-up.
    const bool keep_all_mode =
        from.live || options.now_ns < s->state_since_ns() || options.now_ns - s->state_since_ns() <= options.dead_grace_ns;
    collect_snapshot(*s, base, from, keep_all_mode, out);
    collect_cumulative(*s, base, from, keep_all_mode, out);
  }
}

}  // namespace rankstat
