// Human-readable renderings of the rank documents (docs/api.md): the `ranks` table and one rank's
// `show` page. Both take the same documents whether they came from the daemon or from --direct.
#pragma once

#include <boost/json/object.hpp>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "table.hpp"

namespace rankstat::cli {

const char* state_style(std::string_view state);

// The `rankstat ranks` table, plus the rejected-segments line.
std::vector<StyledLine> render_ranks(const boost::json::object& ranks_document);

// "rejected segments: reason=count ..." from a ranks document's `rejected_segments`; nullopt when there
// are none (shared by `ranks` and `top`).
std::optional<StyledLine> rejected_segments_line(const boost::json::object& rejected_segments);

// The `rankstat show` page: identity and liveness, the scheduler snapshot by SchedulerStats section,
// the queue breakdown by priority, then counters, gauges and histogram summaries.
std::vector<StyledLine> render_rank(const boost::json::object& detail);

// histogram_quantile over the cumulative buckets of a histogram entry; nullopt when empty.
std::optional<double> histogram_quantile(double q, const boost::json::object& histogram);

}  // namespace rankstat::cli
