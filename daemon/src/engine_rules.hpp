// What the engines' own conventions decide, written once: which rank exports the scheduler metrics, the
// identity labels and their order, how routing-key bins and priority values are labelled, which priority
// values stay exported, and the gauges integrated by default. The daemon knows no engine's catalogue (the
// families, help, labels and modes come from what the engine declared in its segment); the rules that
// are part of the shared-memory contract stay next to it (shmproto's scheduler_snapshot.hpp: the typed
// snapshot's fields and families, the routing-key families and bounds, and shm::ReportOwnership, the
// report-kind ownership and idle rule that rankstat --direct applies too).
#pragma once

#include <cstdint>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "rankstat/shmproto/layout.hpp"
#include "rankstat/shmproto/scheduler_snapshot.hpp"

namespace rankstat {

// SGLang's engine-level rule: only the stats-logging scheduler (attn_tp_rank 0 and, in newer SGLang,
// attn_cp_rank 0) exports the scheduler metrics, unless all-schedulers mode is on. Other roles always do.
bool exports_engine_metrics(const shm::SegmentHeader& identity);

// The engine labels of a segment's per-rank series, in SGLang's order, each passed to `add(name, value)`:
// model_name, engine_type, tp_rank, pp_rank, moe_ep_rank (schedulers), priority (empty, when priority
// scheduling is on), dp_rank (schedulers, when set).
inline constexpr std::string_view kIdentityLabelNames[] = {"model_name",  "engine_type", "tp_rank", "pp_rank",
                                                           "moe_ep_rank", "priority",    "dp_rank"};
template <typename Add>
void for_each_identity_label(const shm::SegmentHeader& h, Add&& add) {
  add(std::string("model_name"), std::string(h.model_name));
  add(std::string("engine_type"), std::string(h.engine_type));
  const bool scheduler = h.role == static_cast<std::uint32_t>(shm::Role::kScheduler);
  if (scheduler) {
    add(std::string("tp_rank"), std::to_string(h.tp_rank));
    add(std::string("pp_rank"), std::to_string(h.pp_rank));
    add(std::string("moe_ep_rank"), std::to_string(h.moe_ep_rank));
  }
  if ((h.flags & shm::kFlagPriorityScheduling) != 0) add(std::string("priority"), std::string());
  if (scheduler && h.dp_rank != shm::kRankUnset) add(std::string("dp_rank"), std::to_string(h.dp_rank));
}

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
