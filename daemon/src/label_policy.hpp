// Which labels an engine series is exported with, and which labels an operator may add: the identity
// labels a segment's header gives its per-rank series (shm::for_each_identity_label, shmproto's
// identity_labels.hpp, then its extra labels and the configured instance label), a series' own labels
// over them, and the names a constant label (--label.NAME=VALUE) may not take. The family merge
// (family_set.hpp) and what a generation contributes (generation_contributions.hpp) build labels only
// through these.
#pragma once

#include <prometheus/client_metric.h>

#include <string>
#include <string_view>
#include <vector>

#include "rank_segment.hpp"
#include "rankstat/shmproto/layout.hpp"

namespace rankstat {

using Labels = std::vector<prometheus::ClientMetric::Label>;

// Replaces or appends `name`'s value: a series label overrides an identity label of the same name
// (e.g. priority="3" over the identity's priority="").
void set_label(Labels& labels, const std::string& name, const std::string& value);

// The identity labels of a segment: the engine's (shm::for_each_identity_label), its extra labels, then
// `instance_label`="<instance id>" when an instance label is configured.
Labels identity_labels(const shm::SegmentHeader& identity, const std::string& instance_label = "");

// Why `name` cannot be an operator-set constant label, or empty when it can: not a valid label name,
// reserved (`__*`, and `le`, `quantile`, `pid`, `gt`, which the exposition or a gauge mode adds), set by
// Prometheus at scrape time (`job`, `instance`), or one of the engine labels identity_labels() sets
// (`instance_label` included), which would then be ambiguous on every per-rank series.
std::string constant_label_refusal(std::string_view name, std::string_view instance_label);

// The labels a cumulative series is exported with: the identity labels (unless the series opts out),
// overridden or extended by the series' own labels.
Labels series_labels(const Labels& identity, const SeriesState& series);

}  // namespace rankstat
