// Who a segment belongs to (SegmentIdentity, the labels it exports) and the rules its strings and extra
// labels must follow before a segment is created.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "rankstat/shmproto/error_text.hpp"
#include "rankstat/shmproto/identity_labels.hpp"
#include "rankstat/shmproto/label_lists.hpp"
#include "rankstat/shmproto/layout.hpp"
#include "rankstat/shmproto/naming.hpp"
#include "rankstat/shmproto/text_rules.hpp"

namespace rankstat::shm {

// Who a segment belongs to; becomes the exported labels.
struct SegmentIdentity {
  Role role = Role::kScheduler;
  std::string instance = "default";
  std::string rank_key;  // empty: derived from the ranks (schedulers) or the pid (others)
  std::string model_name;
  std::string engine_type = "unified";
  std::int32_t tp_rank = 0;
  std::int32_t pp_rank = 0;
  std::int32_t dp_rank = kRankUnset;
  std::int32_t moe_ep_rank = 0;
  std::int32_t attn_tp_rank = kRankUnset;  // kRankUnset: same as tp_rank
  std::int32_t attn_dp_rank = kRankUnset;
  std::int32_t attn_cp_rank = 0;
  std::int32_t tp_size = 1;
  std::int32_t pp_size = 1;
  std::int32_t dp_size = 1;
  std::uint32_t flags = 0;
  LabelPairs extra_labels;
};

inline std::string resolve_rank_key(const SegmentIdentity& identity, std::uint32_t pid) {
  if (!identity.rank_key.empty()) return identity.rank_key;
  if (identity.role == Role::kScheduler) {
    return scheduler_rank_key(identity.tp_rank, identity.pp_rank, identity.moe_ep_rank, identity.dp_rank);
  }
  return "pid" + std::to_string(pid);
}

// Why the identity strings and extra labels cannot all become Prometheus labels, naming the culprit;
// nullopt when they can. An extra label may not be reserved: `le` (histogram buckets, SGLang's
// routing-key gauges), `quantile` (summaries), `pid` (per-process gauges) or a "__" prefix.
inline std::optional<std::string> identity_label_problem(const SegmentIdentity& identity) {
  const std::pair<std::string_view, const std::string*> strings[] = {{"model name", &identity.model_name},
                                                                     {"engine type", &identity.engine_type}};
  for (const auto& [what, text] : strings) {
    if (!is_valid_utf8(*text))
      return std::string(what) + " " + quoted_for_message(*text) + " is not valid UTF-8";
  }
  for (std::size_t i = 0; i < identity.extra_labels.size(); ++i) {
    const auto& [name, value] = identity.extra_labels[i];
    const std::string label = "extra label " + quoted_for_message(name);
    // Classic names only, like the daemon's constant labels: an operator's setting on every series.
    if (!is_extra_label_name(name)) {
      return label + " is not a valid label name ([a-zA-Z_][a-zA-Z0-9_]*, no \"__\" prefix)";
    }
    if (name == "le" || name == "quantile" || name == "pid") {
      return label + " is reserved (le: histogram buckets, quantile: summaries, pid: per-process gauges)";
    }
    // The labels every identity-labelled series gets from the segment header (identity_labels.hpp).
    if (is_identity_label_name(name)) return label + " repeats an identity label the segment header sets";
    for (std::size_t j = 0; j < i; ++j) {
      if (identity.extra_labels[j].first == name) return label + " is given twice";
    }
    if (!is_valid_utf8(value) || value.find('\0') != std::string::npos) {
      return label + " has a value that is not valid UTF-8 text: " + quoted_for_message(value);
    }
  }
  return std::nullopt;
}

}  // namespace rankstat::shm
