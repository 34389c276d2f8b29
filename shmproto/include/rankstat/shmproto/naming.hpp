// Segment names: rankstat.<instance>.<role>.<rank-key>. The name is the registry: a reader learns
// which segments exist by listing the directory, and a restarted rank replaces its predecessor by
// renaming a new file onto the same name. A writer whose name is held by a live writer publishes
// under "<rank-key>_2", ... instead (segment.hpp, create_segment): readers take the rank key from the
// header, never from an expected name.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "rankstat/shmproto/layout.hpp"

namespace rankstat::shm {

inline constexpr std::string_view kSegmentPrefix = "rankstat.";
inline constexpr std::string_view kTemporaryMarker = ".tmp.";

// Instance ids and rank keys: 1..47 characters of [A-Za-z0-9_-], so names never contain a dot or a
// slash of their own and stay parseable.
inline bool is_valid_name_component(std::string_view part) {
  if (part.empty() || part.size() > 47) return false;
  for (char c : part) {
    const bool ok =
        (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

inline std::string_view role_name(Role role) {
  switch (role) {
    case Role::kScheduler:
      return "scheduler";
    case Role::kTokenizer:
      return "tokenizer";
    case Role::kDetokenizer:
      return "detokenizer";
    case Role::kOther:
      return "other";
    case Role::kUnknown:
      break;
  }
  return "unknown";
}

inline std::optional<Role> role_from_name(std::string_view name) {
  for (Role r : {Role::kScheduler, Role::kTokenizer, Role::kDetokenizer, Role::kOther}) {
    if (role_name(r) == name) return r;
  }
  return std::nullopt;
}

inline std::string segment_name(std::string_view instance, Role role, std::string_view rank_key) {
  std::string name(kSegmentPrefix);
  name.append(instance).append(".").append(role_name(role)).append(".").append(rank_key);
  return name;
}

// Rank key of a scheduler rank, e.g. "tp1-pp0-ep1-dp0"; the dp part only when dp_rank is set.
inline std::string scheduler_rank_key(std::int32_t tp_rank, std::int32_t pp_rank, std::int32_t moe_ep_rank,
                                      std::int32_t dp_rank) {
  std::string key =
      "tp" + std::to_string(tp_rank) + "-pp" + std::to_string(pp_rank) + "-ep" + std::to_string(moe_ep_rank);
  if (dp_rank != kRankUnset) key += "-dp" + std::to_string(dp_rank);
  return key;
}

struct ParsedSegmentName {
  std::string instance;
  Role role = Role::kUnknown;
  std::string rank_key;
};

// Parses a final segment name; temporaries and foreign files give nullopt.
inline std::optional<ParsedSegmentName> parse_segment_name(std::string_view name) {
  if (!name.starts_with(kSegmentPrefix)) return std::nullopt;
  if (name.find(kTemporaryMarker) != std::string_view::npos) return std::nullopt;
  std::string_view rest = name.substr(kSegmentPrefix.size());
  const auto dot1 = rest.find('.');
  if (dot1 == std::string_view::npos) return std::nullopt;
  const auto dot2 = rest.find('.', dot1 + 1);
  if (dot2 == std::string_view::npos) return std::nullopt;
  ParsedSegmentName parsed;
  const std::string_view instance = rest.substr(0, dot1);
  const std::string_view role = rest.substr(dot1 + 1, dot2 - dot1 - 1);
  const std::string_view rank_key = rest.substr(dot2 + 1);
  const auto maybe_role = role_from_name(role);
  if (!maybe_role || !is_valid_name_component(instance) || !is_valid_name_component(rank_key)) {
    return std::nullopt;
  }
  parsed.instance = std::string(instance);
  parsed.role = *maybe_role;
  parsed.rank_key = std::string(rank_key);
  return parsed;
}

// "rankstat.<...>.tmp.<pid>.<nonce>": a segment still being created, or left behind by a writer that
// died during creation. Returns the creator's pid.
inline std::optional<std::uint32_t> parse_temporary_pid(std::string_view name) {
  if (!name.starts_with(kSegmentPrefix)) return std::nullopt;
  const auto marker = name.rfind(kTemporaryMarker);
  if (marker == std::string_view::npos) return std::nullopt;
  std::string_view rest = name.substr(marker + kTemporaryMarker.size());
  std::uint32_t pid = 0;
  std::size_t i = 0;
  for (; i < rest.size() && rest[i] >= '0' && rest[i] <= '9'; ++i) {
    pid = pid * 10 + static_cast<std::uint32_t>(rest[i] - '0');
    if (pid > 0x3fffffffu) return std::nullopt;
  }
  if (i == 0 || i >= rest.size() || rest[i] != '.') return std::nullopt;
  return pid;
}

// prometheus_client's name of a gauge mode ("livemostrecent", ...); "unknown" past the known ones.
inline std::string_view gauge_mode_name(GaugeMode mode) {
  static constexpr std::string_view kNames[kGaugeModeCount] = {
      "all", "liveall", "sum", "livesum", "min", "livemin", "max", "livemax", "mostrecent", "livemostrecent"};
  const auto i = static_cast<std::size_t>(mode);
  return i < kGaugeModeCount ? kNames[i] : "unknown";
}

// The parallelism coordinates of a segment's writer, by the names readers show them under; a value of
// kRankUnset means the writer did not set it.
struct RankNumber {
  const char* name;
  std::int32_t value;
};

inline std::array<RankNumber, 10> rank_numbers(const SegmentHeader& h) {
  return {{{"tp_rank", h.tp_rank},
           {"pp_rank", h.pp_rank},
           {"dp_rank", h.dp_rank},
           {"moe_ep_rank", h.moe_ep_rank},
           {"attn_tp_rank", h.attn_tp_rank},
           {"attn_dp_rank", h.attn_dp_rank},
           {"attn_cp_rank", h.attn_cp_rank},
           {"tp_size", h.tp_size},
           {"pp_size", h.pp_size},
           {"dp_size", h.dp_size}}};
}

// "<major>.<minor>" of the layout a segment was written with.
inline std::string layout_version_text(const SegmentHeader& h) {
  return std::to_string(h.layout_major) + "." + std::to_string(h.layout_minor);
}

}  // namespace rankstat::shm
