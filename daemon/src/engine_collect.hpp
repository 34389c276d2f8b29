// Collecting a generation's engine metrics for a scrape: its scheduler snapshot (fields, per-priority
// breakdown, routing-key bins) when the engine rule passes, and every other contribution
// (generation_contributions.hpp, the definition retirement uses too), added to a FamilySet under the
// generation's identity labels. A dead generation's per-process (`all` mode) gauges stay for the grace
// period only.
// Thread contract: called on the io thread while it builds a scrape; reads the generations it is given.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "family_set.hpp"
#include "gauge_integral.hpp"
#include "rank_segment.hpp"
#include "rankstat/shmproto/scheduler_snapshot.hpp"

namespace rankstat {

struct CollectOptions {
  std::string instance_label;  // --label.instance; empty: none
  std::uint64_t now_ns = 0;
  std::uint64_t dead_grace_ns = 0;  // a dead generation's `all`-mode series are kept this long
  // Integrated gauges (gauge_integral.hpp); null or empty: none exported.
  const IntegralSettings* integrals = nullptr;
};

// The exported family of a scheduler snapshot field and its gauge mode (from the record's own table,
// shm::kSchedulerScalarFields); nullopt-like false when the field is not exported as a gauge.
std::string snapshot_family_name(const shm::ScalarField& field);
bool snapshot_field_gauge_mode(const shm::ScalarField& field, shm::GaugeMode& mode);

// Adds every engine family that the generations contribute. A folded generation (RankSegment::folded)
// contributes its gauges only: its counters, histograms, summaries and integrals are in the retired totals.
void collect_engine_metrics(const std::vector<const RankSegment*>& generations, const CollectOptions& options,
                            FamilySet& out);

}  // namespace rankstat
