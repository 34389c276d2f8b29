#include "rankstat/rankview/rank_documents.hpp"

#include <cmath>

#include "rankstat/shmproto/naming.hpp"

namespace rankstat::rankview {
namespace {

boost::json::value number_or_null(double v) {
  if (std::isfinite(v)) return v;
  return nullptr;  // JSON has no NaN (fwd_occupancy is NaN when the device timer is off)
}

double seconds_between(std::uint64_t earlier_ns, std::uint64_t later_ns) {
  return later_ns > earlier_ns ? static_cast<double>(later_ns - earlier_ns) / 1e9 : 0.0;
}

}  // namespace

boost::json::object rank_summary(const RankFacts& facts, std::uint64_t now_ns) {
  const shm::SegmentHeader& h = *facts.identity;
  const shm::ProducerState& p = facts.producer;
  boost::json::object o;
  o["id"] = facts.id;
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
  o["state"] = shm::rank_state_name(facts.state);
  if (facts.untrusted_owner_uid) {
    o["untrusted_owner"] = *facts.untrusted_owner_uid;
    o["warning"] =
        "owned by " + facts.untrusted_owner_name +
        ", not this user, root or --allowed-uids: the daemon refuses it and its values may be forged";
  }
  o["heartbeat_age_seconds"] = seconds_between(p.heartbeat_ns, now_ns);
  o["records_per_second"] = facts.records_per_second;
  o["records_written"] = p.records_written;
  if (facts.records_drained) {
    o["records_drained"] = *facts.records_drained;
  } else {
    o["records_drained"] = nullptr;
  }
  o["dropped_records"] = p.dropped_records;
  o["oversize_records"] = p.oversize_records;
  o["ring_bytes"] = h.ring_bytes;
  o["ring_fill_ratio"] = facts.ring_fill_ratio;
  o["ring_quarantined"] = facts.ring_quarantined;
  o["layout_version"] = shm::layout_version_text(h);
  o["priority_scheduling"] = (h.flags & shm::kFlagPriorityScheduling) != 0;
  o["all_schedulers_metrics"] = (h.flags & shm::kFlagAllSchedulersMetrics) != 0;
  return o;
}

boost::json::value scheduler_document(const SchedulerSample* sample, std::uint64_t now_ns) {
  if (sample == nullptr) return nullptr;
  const shm::SchedulerSnapshot& fixed = *sample->fixed;
  boost::json::object snapshot;
  snapshot["report_kind"] = shm::report_kind_name(fixed.report_kind);
  snapshot["sequence"] = sample->sequence;
  snapshot["age_seconds"] = seconds_between(sample->timestamp_ns, now_ns);
  boost::json::object sections;
  for (const shm::ScalarField& field : shm::kSchedulerScalarFields) {
    if (!shm::field_present(fixed, field)) continue;
    auto& section = sections[field.section];
    if (!section.is_object()) section = boost::json::object();
    const shm::ScalarValue v = shm::read_scalar(fixed, field);
    if (v.is_integer) {
      section.as_object()[field.name] = v.integer;
    } else {
      section.as_object()[field.name] = number_or_null(v.real);
    }
  }
  boost::json::array priorities;
  for (const shm::PriorityCount& e : sample->priorities) {
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
  return snapshot;
}

boost::json::object series_document(const shm::SeriesInfo& info, const shm::SeriesValue& value) {
  boost::json::object entry;
  entry["family"] = info.family;
  boost::json::object labels;
  for (const auto& [name, text] : info.labels) labels[name] = text;
  entry["labels"] = std::move(labels);
  switch (info.kind) {
    case shm::SeriesKind::kCounter:
      entry["type"] = "counter";
      entry["value"] = value.consistent ? number_or_null(value.value) : nullptr;
      break;
    case shm::SeriesKind::kGauge:
      entry["type"] = "gauge";
      entry["mode"] = shm::gauge_mode_name(info.gauge_mode);
      if (value.set_ns == 0 || !value.consistent) {
        entry["value"] = nullptr;
      } else {
        entry["value"] = number_or_null(value.value);
      }
      break;
    case shm::SeriesKind::kSummary:
    case shm::SeriesKind::kHistogram: {
      const bool summary = info.kind == shm::SeriesKind::kSummary;
      entry["type"] = summary ? "summary" : "histogram";
      std::uint64_t total = 0;
      for (auto c : value.counts) total += c;
      entry["count"] = total;
      entry["sum"] = number_or_null(value.sum);
      if (summary) break;
      boost::json::array buckets;
      std::uint64_t cumulative = 0;
      for (std::size_t b = 0; b < value.counts.size(); ++b) {
        cumulative += value.counts[b];
        boost::json::object bucket;
        if (b < info.bounds.size()) {
          bucket["le"] = info.bounds[b];
        } else {
          bucket["le"] = "+Inf";
        }
        bucket["cumulative_count"] = cumulative;
        buckets.emplace_back(std::move(bucket));
      }
      entry["buckets"] = std::move(buckets);
      break;
    }
  }
  return entry;
}

boost::json::object ranks_document(const std::string& shm_dir, boost::json::array ranks,
                                   const std::map<std::string, std::uint64_t>& rejected_by_reason,
                                   bool details) {
  boost::json::object doc;
  doc["shm_dir"] = shm::replace_invalid_utf8(shm_dir);
  doc["ranks"] = std::move(ranks);
  if (details) doc["details"] = true;
  boost::json::object rejected;
  for (const auto& [reason, count] : rejected_by_reason) rejected[reason] = count;
  doc["rejected_segments"] = std::move(rejected);
  return doc;
}

}  // namespace rankstat::rankview
