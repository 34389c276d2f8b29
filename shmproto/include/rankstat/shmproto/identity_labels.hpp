// The identity labels: the labels every identity-labelled series of a segment is exported with, taken
// from the segment header, in SGLang's order. Written once here, for the writer (an extra label may not
// repeat one: segment.hpp's identity_label_problem), the daemon (engine_rules.hpp, label_policy.cpp) and
// the C ABI (rankstat_identity_label, which the Python package reads instead of a list of its own).
//
// Which labels a header carries, and their values:
//   model_name, engine_type   always
//   tp_rank, pp_rank,         schedulers
//   moe_ep_rank
//   priority                  "" when priority scheduling is on (kFlagPriorityScheduling); a series'
//                             own priority label overrides it
//   dp_rank                   schedulers whose dp_rank is set (not kRankUnset)
#pragma once

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "rankstat/shmproto/layout.hpp"

namespace rankstat::shm {

// X(enumerator, label name), in the order of the exposition.
// clang-format off
#define RANKSTAT_IDENTITY_LABELS(X) \
  X(kModelName, "model_name")       \
  X(kEngineType, "engine_type")     \
  X(kTpRank, "tp_rank")             \
  X(kPpRank, "pp_rank")             \
  X(kMoeEpRank, "moe_ep_rank")      \
  X(kPriority, "priority")          \
  X(kDpRank, "dp_rank")
// clang-format on

RANKSTAT_DEFINE_ENUM_WITH_TEXTS(IdentityLabel, kIdentityLabelNames, RANKSTAT_IDENTITY_LABELS)
inline constexpr std::size_t kIdentityLabelCount = std::size(kIdentityLabelNames);

inline constexpr std::string_view identity_label_name(IdentityLabel label) {
  return kIdentityLabelNames[static_cast<std::size_t>(label)];
}

inline constexpr bool is_identity_label_name(std::string_view name) {
  for (const std::string_view identity : kIdentityLabelNames) {
    if (name == identity) return true;
  }
  return false;
}

// `label`'s value on a segment with header `h`, or nullopt when that segment does not carry it. Reads
// only group A (immutable once the magic is published); the strings are cut at their field's end, so a
// header without a terminating NUL yields a bounded value.
inline std::optional<std::string> identity_label_value(const SegmentHeader& h, IdentityLabel label) {
  const bool scheduler = h.role == static_cast<std::uint32_t>(Role::kScheduler);
  const auto text = [](const char* field, std::size_t capacity) {
    std::size_t length = 0;
    while (length < capacity && field[length] != '\0') ++length;
    return std::string(field, length);
  };
  switch (label) {
    case IdentityLabel::kModelName:
      return text(h.model_name, sizeof h.model_name);
    case IdentityLabel::kEngineType:
      return text(h.engine_type, sizeof h.engine_type);
    case IdentityLabel::kTpRank:
      return scheduler ? std::optional(std::to_string(h.tp_rank)) : std::nullopt;
    case IdentityLabel::kPpRank:
      return scheduler ? std::optional(std::to_string(h.pp_rank)) : std::nullopt;
    case IdentityLabel::kMoeEpRank:
      return scheduler ? std::optional(std::to_string(h.moe_ep_rank)) : std::nullopt;
    case IdentityLabel::kPriority:
      return (h.flags & kFlagPriorityScheduling) != 0 ? std::optional(std::string()) : std::nullopt;
    case IdentityLabel::kDpRank:
      return scheduler && h.dp_rank != kRankUnset ? std::optional(std::to_string(h.dp_rank)) : std::nullopt;
  }
  return std::nullopt;
}

// Passes each label the header carries to `add(name, value)` (both std::string), in order.
template <typename Add>
void for_each_identity_label(const SegmentHeader& h, Add&& add) {
  for (std::size_t i = 0; i < kIdentityLabelCount; ++i) {
    const auto label = static_cast<IdentityLabel>(i);
    if (auto value = identity_label_value(h, label))
      add(std::string(identity_label_name(label)), std::move(*value));
  }
}

}  // namespace rankstat::shm
