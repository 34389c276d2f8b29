#include "rank_lookup.hpp"

#include <boost/json/value.hpp>

namespace rankstat::cli {

bool is_plausible_rank_id(const std::string& text) {
  if (text.empty() || text.size() > 160) return false;
  for (char c : text) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
                    c == '-' || c == '.';
    if (!ok) return false;
  }
  return true;
}

RankMatch match_rank(const boost::json::object& ranks_document, const std::string& wanted) {
  RankMatch exact;
  RankMatch loose;
  const auto* ranks = ranks_document.if_contains("ranks");
  if (ranks == nullptr || !ranks->is_array()) return exact;
  for (const auto& entry : ranks->as_array()) {
    if (!entry.is_object()) continue;
    const auto& rank = entry.as_object();
    const auto* id = rank.if_contains("id");
    const auto* instance = rank.if_contains("instance");
    const auto* key = rank.if_contains("rank_key");
    if (id == nullptr || !id->is_string()) continue;
    const std::string id_text(id->as_string());
    if (id_text == wanted) exact.ids.push_back(id_text);
    if (key == nullptr || !key->is_string() || instance == nullptr || !instance->is_string()) continue;
    const std::string key_text(key->as_string());
    const std::string instance_text(instance->as_string());
    if (key_text == wanted || instance_text + "." + key_text == wanted) loose.ids.push_back(id_text);
  }
  return exact.ids.empty() ? loose : exact;
}

}  // namespace rankstat::cli
