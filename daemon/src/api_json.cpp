#include "api_json.hpp"

#include <boost/json/serialize.hpp>
#include <cmath>
#include <cstring>

#include "rankstat/shmproto/naming.hpp"
#include "rankstat/shmproto/scheduler_snapshot.hpp"

namespace rankstat {
namespace {

boost::json::value number_or_null(double v) {
  if (std::isfinite(v)) return v;
  return nullptr;  // JSON has no NaN (fwd_occupancy is NaN when the device timer is off)
}

}  // namespace

boost::json::object rank_summary_json(const RankSegment& s, std::uint64_t now_ns) {
  const shm::SegmentHeader& h = s.identity();
  const shm::ProducerState p = s.producer();
  boost::json::object o;
  o["id"] = s.id();
  // Header strings are the rank's bytes: replaced where not UTF-8, so that the document stays JSON.
  o["instance"] = shm::replace_invalid_utf8(h.instance);
  o["role"] = shm::role_name(static_cast<shm::Role>(h.role));
  o["rank_key"] = shm::replace_invalid_utf8(h.rank_key);
  o["model_name"] = shm::replace_invalid_utf8(h.model_name);
  o["engine_type"] = shm::replace_invalid_utf8(h.engine_type);
  boost::json::object ranks;
  for (const auto& [name, value] : shm::rank_numbers(h)) {
    if (value == shm::kRankUnset) {
      ranks[name] = nullptr;
    } else {
      ranks[name] = value;
    }
  }
  o["ranks"] = std::move(ranks);
  o["pid"] = h.pid;
  o["generation"] = std::to_string(h.generation);
  o["state"] = rank_state_name(s.state());
  o["heartbeat_age_seconds"] =
      now_ns > p.heartbeat_ns ? static_cast<double>(now_ns - p.heartbeat_ns) / 1e9 : 0.0;
  o["records_per_second"] = s.records_per_second();
  o["records_written"] = p.records_written;
  o["records_drained"] = s.records_drained();
  o["dropped_records"] = p.dropped_records;
  o["oversize_records"] = p.oversize_records;
  o["ring_bytes"] = h.ring_bytes;
  o["ring_fill_ratio"] = s.ring_fill_ratio();
  o["ring_quarantined"] = s.ring_corrupt();
  o["layout_version"] = shm::layout_version_text(h);
  o["priority_scheduling"] = (h.flags & shm::kFlagPriorityScheduling) != 0;
  o["all_schedulers_metrics"] = (h.flags & shm::kFlagAllSchedulersMetrics) != 0;
  return o;
}

boost::json::object rank_detail_json(const RankSegment& s, std::uint64_t now_ns) {
  boost::json::object o = rank_summary_json(s, now_ns);
  const SchedulerView& view = s.scheduler();
  if (view.present) {
    boost::json::object snapshot;
    snapshot["report_kind"] = shm::report_kind_name(view.fixed.report_kind);
    snapshot["sequence"] = view.sequence;
    snapshot["age_seconds"] =
        now_ns > view.timestamp_ns ? static_cast<double>(now_ns - view.timestamp_ns) / 1e9 : 0.0;
    boost::json::object sections;
    for (const shm::ScalarField& field : shm::kSchedulerScalarFields) {
      if (!shm::field_present(view.fixed, field)) continue;
      auto& section = sections[field.section];
      if (!section.is_object()) section = boost::json::object();
      const shm::ScalarValue v = shm::read_scalar(view.fixed, field);
      if (v.is_integer) {
        section.as_object()[field.name] = v.integer;
      } else {
        section.as_object()[field.name] = number_or_null(v.real);
      }
    }
    boost::json::array priorities;
    for (const shm::PriorityCount& e : view.priorities) {
      if (e.queue >= shm::kQueueIdCount) continue;
      boost::json::object entry;
      entry["queue"] = shm::kQueueTotalField[e.queue];
      if ((e.flags & shm::kPriorityIsNone) != 0) {
        entry["priority"] = nullptr;
      } else {
        entry["priority"] = e.priority;
      }
      entry["count"] = e.count;
      priorities.push_back(std::move(entry));
    }
    sections["priorities"] = std::move(priorities);
    snapshot["fields"] = std::move(sections);
    o["scheduler"] = std::move(snapshot);
  } else {
    o["scheduler"] = nullptr;
  }
  boost::json::array series;
  for (const SeriesState& st : s.series()) {
    boost::json::object entry;
    entry["family"] = st.info.family;
    boost::json::object labels;
    for (const auto& [name, value] : st.info.labels) labels[name] = value;
    entry["labels"] = std::move(labels);
    switch (st.info.kind) {
      case shm::SeriesKind::kCounter:
        entry["type"] = "counter";
        entry["value"] = number_or_null(st.value.value);
        break;
      case shm::SeriesKind::kGauge:
        entry["type"] = "gauge";
        entry["mode"] = shm::gauge_mode_name(st.info.gauge_mode);
        if (st.value.set_ns == 0) {
          entry["value"] = nullptr;
        } else {
          entry["value"] = number_or_null(st.value.value);
        }
        break;
      case shm::SeriesKind::kSummary:
      case shm::SeriesKind::kHistogram: {
        const bool summary = st.info.kind == shm::SeriesKind::kSummary;
        entry["type"] = summary ? "summary" : "histogram";
        std::uint64_t count = 0;
        for (auto c : st.value.counts) count += c;
        entry["count"] = count;
        entry["sum"] = number_or_null(st.value.sum);
        if (summary) break;
        boost::json::array buckets;
        std::uint64_t cumulative = 0;
        for (std::size_t i = 0; i < st.value.counts.size(); ++i) {
          cumulative += st.value.counts[i];
          boost::json::object b;
          if (i < st.info.bounds.size()) {
            b["le"] = st.info.bounds[i];
          } else {
            b["le"] = "+Inf";
          }
          b["cumulative_count"] = cumulative;
          buckets.push_back(std::move(b));
        }
        entry["buckets"] = std::move(buckets);
        break;
      }
    }
    series.push_back(std::move(entry));
  }
  o["series"] = std::move(series);
  return o;
}

std::string ranks_json(const SegmentRegistry& registry, std::uint64_t now_ns, bool details) {
  boost::json::object doc;
  doc["shm_dir"] = shm::replace_invalid_utf8(registry.directory());
  boost::json::array ranks;
  for (const RankSegment* s : registry.current()) {
    ranks.push_back(details ? rank_detail_json(*s, now_ns) : rank_summary_json(*s, now_ns));
  }
  doc["ranks"] = std::move(ranks);
  if (details) doc["details"] = true;
  boost::json::object rejected;
  const auto& c = registry.counters();
  for (int i = 1; i < shm::kRejectReasonCount; ++i) {
    if (c.rejected_by_reason[static_cast<std::size_t>(i)] == 0) continue;
    rejected[shm::reject_reason_name(static_cast<shm::RejectReason>(i))] =
        c.rejected_by_reason[static_cast<std::size_t>(i)];
  }
  doc["rejected_segments"] = std::move(rejected);
  return boost::json::serialize(doc);
}

}  // namespace rankstat
