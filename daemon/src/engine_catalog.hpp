// What the daemon knows about engine metric families beyond what segments carry: their help text.
// (Types, modes, labels and buckets travel in the segments; help text would only bloat them.)
#pragma once

#include <string_view>

namespace rankstat {

// Help text for an engine family, in our own words; a generic text for families not in the catalog.
// Never contains a backslash or a newline (prometheus-cpp does not escape HELP).
std::string_view engine_help(std::string_view family);

// Families SGLang declares as Summary (eplb_balancedness). They travel as histograms without finite
// bounds (count and sum only, as prometheus_client's multiprocess summaries) and are exported as summaries.
bool engine_family_is_summary(std::string_view family);

// Families SGLang labels with their own labels only, without model_name, engine_type or rank labels
// (kv_transfer_timeouts_total, eplb_gpu_physical_count and the HTTP front-end families). Same effect as
// kSeriesWithoutIdentityLabels, which no client API can set yet.
bool engine_family_without_identity_labels(std::string_view family);

}  // namespace rankstat
