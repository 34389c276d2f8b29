// The two encodings of a label list in shared memory: a series' own labels in the cumulative block's text
// area (length-prefixed, any bytes) and the segment header's extra labels (NUL-delimited, classic names).
// Decoders take untrusted bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "rankstat/shmproto/text_rules.hpp"

namespace rankstat::shm {

using LabelPairs = std::vector<std::pair<std::string, std::string>>;

// A series' label list in the text area (layout.hpp, SeriesDescriptor): per label a u32 name length,
// the name, a u32 value length, the value. Values may hold any byte, NUL included.
inline std::uint64_t encoded_series_label_bytes(const LabelPairs& labels) {
  std::uint64_t bytes = 0;
  for (const auto& [name, value] : labels) bytes += 4 + name.size() + 4 + value.size();
  return bytes;
}

// Writes the list encoded_series_label_bytes(labels) long into `out`; every text is shorter than 4 GiB
// (the caller checked the list fits the text area).
inline void encode_series_labels(const LabelPairs& labels, char* out) {
  std::size_t at = 0;
  auto put = [&](std::string_view text) {
    const auto length = static_cast<std::uint32_t>(text.size());
    std::memcpy(out + at, &length, 4);
    if (!text.empty()) std::memcpy(out + at + 4, text.data(), text.size());
    at += 4 + text.size();
  };
  for (const auto& [name, value] : labels) {
    put(name);
    put(value);
  }
}

// Decodes a series' label list of exactly `size` bytes; nullopt unless every length stays inside it and
// every name is valid (the bytes come from shared memory: untrusted).
inline std::optional<LabelPairs> decode_series_labels(const char* bytes, std::size_t size) {
  LabelPairs labels;
  std::size_t at = 0;
  auto take = [&](std::string& text) {
    std::uint32_t length = 0;
    if (size - at < 4) return false;
    std::memcpy(&length, bytes + at, 4);
    at += 4;
    if (length > size - at) return false;
    text.assign(bytes + at, length);
    at += length;
    return true;
  };
  while (at < size) {
    std::string name;
    std::string value;
    if (!take(name) || !take(value) || !is_valid_label_name(name)) return std::nullopt;
    labels.emplace_back(std::move(name), std::move(value));
  }
  return labels;
}

// The segment header's extra labels: "name\0value\0...\0" in a fixed field (identity labels, which
// never hold a NUL). Their names are classic and not `__`-prefixed (an operator's setting on every series,
// like the daemon's constant labels: segment_identity.hpp identity_label_problem), and a reader holds a
// header to the same rule. Encodes into `out` (capacity bytes).
inline bool is_extra_label_name(std::string_view name) {
  return is_classic_label_name(name) && !name.starts_with("__");
}

inline bool encode_label_pairs(const LabelPairs& labels, char* out, std::size_t capacity) {
  std::size_t used = 0;
  for (const auto& [name, value] : labels) {
    if (!is_extra_label_name(name) || value.find('\0') != std::string::npos) return false;
    const std::size_t need = name.size() + 1 + value.size() + 1;
    if (used + need + 1 > capacity) return false;
    std::memcpy(out + used, name.data(), name.size());
    used += name.size();
    out[used++] = '\0';
    std::memcpy(out + used, value.data(), value.size());
    used += value.size();
    out[used++] = '\0';
  }
  if (used + 1 > capacity) return false;
  out[used] = '\0';
  return true;
}

// Decodes what encode_label_pairs wrote; nullopt if the bytes are not a well-formed list (untrusted).
inline std::optional<LabelPairs> decode_label_pairs(const char* bytes, std::size_t capacity) {
  LabelPairs labels;
  std::size_t pos = 0;
  while (pos < capacity && bytes[pos] != '\0') {
    const void* name_end = std::memchr(bytes + pos, '\0', capacity - pos);
    if (name_end == nullptr) return std::nullopt;
    const auto name_len = static_cast<std::size_t>(static_cast<const char*>(name_end) - (bytes + pos));
    std::string name(bytes + pos, name_len);
    pos += name_len + 1;
    if (pos >= capacity) return std::nullopt;
    const void* value_end = std::memchr(bytes + pos, '\0', capacity - pos);
    if (value_end == nullptr) return std::nullopt;
    const auto value_len = static_cast<std::size_t>(static_cast<const char*>(value_end) - (bytes + pos));
    std::string value(bytes + pos, value_len);
    pos += value_len + 1;
    if (!is_extra_label_name(name)) return std::nullopt;
    labels.emplace_back(std::move(name), std::move(value));
  }
  if (pos >= capacity) return std::nullopt;  // no terminating empty name
  return labels;
}

}  // namespace rankstat::shm
