// What the engines' own conventions decide, written once: which rank exports the scheduler metrics, how
// routing-key bins and priority values are labelled, which priority values stay exported, and the gauges
// integrated by default. The daemon knows no engine's catalogue (the families, help, labels and modes
// come from what the engine declared in its segment); the rules that are part of the shared-memory
// contract stay next to it (shmproto's scheduler_snapshot.hpp: the typed snapshot's fields and
// families, the routing-key families and bounds, and shm::ReportOwnership, the report-kind ownership and
// idle rule that rankstat --direct applies too; identity_labels.hpp: the identity labels and their
// order).
#pragma once

#include <cstdint>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "rankstat/shmproto/identity_labels.hpp"
#include "rankstat/shmproto/layout.hpp"
#include "rankstat/shmproto/scheduler_snapshot.hpp"

namespace rankstat {

// SGLang's engine-level rule: only the stats-logging scheduler (attn_tp_rank 0 and, in newer SGLang,
// attn_cp_rank 0) exports the scheduler metrics, unless all-schedulers mode is on. Other roles always do.
bool exports_engine_metrics(const shm::SegmentHeader& identity);

// The identity labels of a segment's per-rank series (which labels, their values and SGLang's order)
// are part of the shared-memory contract: shm::for_each_identity_label, shmproto's identity_labels.hpp.

// SGLang's routing-key GaugeHistograms are exported one gauge per bin with gt/le labels
// ("gt < count <= le"), the bounds printed as SGLang prints its integer bounds: bin `bin`'s pair.
std::pair<std::string, std::string> routing_key_bin_labels(std::size_t bin);

// A priority value that has appeared in a queue breakdown; SGLang keeps exporting it (as 0 when
// absent) once seen.
struct SeenPriority {
  std::uint8_t queue;
  std::int32_t priority;
  bool is_none;
  // NOLINTNEXTLINE(modernize-use-nullptr): clang-tidy 14 misreads the defaulted <=>
  auto operator<=>(const SeenPriority&) const = default;
};
void note_seen_priorities(std::span<const shm::PriorityCount> counts, std::set<SeenPriority>& seen);
// The priority label value, as SGLang writes it ("None" for requests without one).
std::string priority_label_value(const SeenPriority& priority);

// The default --aggregate.integrate list: the gauges operators watch for saturation (running and queued
// requests per queue kind, KV usage and KV tokens held), in SGLang's and vLLM's spelling; typed snapshot
// fields are matched by their exported family name (sglang:<field>).
const std::vector<std::string>& default_integrated_families();

}  // namespace rankstat
