// The JSON API behind /api/v1/ranks and /api/v1/ranks/<id> (schema in docs/api.md): the daemon's view of
// each rank handed to rankview, which builds the same documents for `rankstat --direct`.
#pragma once

#include <boost/json/value.hpp>

#include <cstdint>
#include <string>
#include <string_view>

#include "rank_segment.hpp"
#include "segment_registry.hpp"

namespace rankstat {

// Summary of one generation: identity, liveness, ring health.
boost::json::object rank_summary_json(const RankSegment& segment, std::uint64_t now_ns);
// The summary plus the latest scheduler snapshot (fields grouped by SchedulerStats section) and every
// cumulative series.
boost::json::object rank_detail_json(const RankSegment& segment, std::uint64_t now_ns);
// {"ranks": [summary...], "shm_dir": ..., "rejected_segments": {...}}; with `details`, every rank's detail
// document instead of its summary and "details": true (one request for what `rankstat top` shows).
std::string ranks_json(const SegmentRegistry& registry, std::uint64_t now_ns, bool details = false);

}  // namespace rankstat
