#include "label_policy.hpp"

#include <utility>

#include "rankstat/shmproto/cumulative.hpp"
#include "rankstat/shmproto/identity_labels.hpp"

namespace rankstat {

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

std::string constant_label_refusal(std::string_view name, std::string_view instance_label) {
  const std::string text(name);
  if (name.starts_with("__")) return "'" + text + "' is reserved (labels starting with __ are Prometheus's)";
  if (!shm::is_classic_label_name(text)) {
    return "'" + text +
           "' is not a valid Prometheus label name (constant labels are classic: [a-zA-Z_][a-zA-Z0-9_]*)";
  }
  for (const std::string_view added : {"le", "quantile", "pid", "gt"}) {
    if (name == added)
      return "'" + text + "' is reserved: the exposition or a gauge mode adds it to engine series";
  }
  for (const std::string_view scrape : {"job", "instance"}) {
    if (name == scrape) {
      return "'" + text + "' is set by Prometheus at scrape time (it would become exported_" + text +
             "); to export the engine instance id, use --label.instance=LABEL";
    }
  }
  // The labels identity_labels() sets below.
  if (shm::is_identity_label_name(name))
    return "'" + text + "' collides with the engine label of that name on per-rank series";
  if (!instance_label.empty() && name == instance_label) {
    return "'" + text +
           "' collides with --label.instance, which names the label carrying the engine instance id";
  }
  return {};
}

Labels identity_labels(const shm::SegmentHeader& h, const std::string& instance_label) {
  Labels labels;
  shm::for_each_identity_label(h, [&](std::string name, std::string value) {
    labels.push_back({std::move(name), std::move(value)});
  });
  if (auto extra = shm::decode_label_pairs(h.extra_labels, sizeof h.extra_labels)) {
    for (auto& [name, value] : *extra) set_label(labels, name, value);
  }
  if (!instance_label.empty()) set_label(labels, instance_label, h.instance);
  return labels;
}

Labels series_labels(const Labels& identity, const SeriesState& series) {
  const bool own_labels_only = (series.info.flags & shm::kSeriesWithoutIdentityLabels) != 0;
  Labels labels = own_labels_only ? Labels{} : identity;
  for (const auto& [name, value] : series.info.labels) set_label(labels, name, value);
  return labels;
}

}  // namespace rankstat
