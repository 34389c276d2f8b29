// Resolving what the user typed to a rank id. `show` takes the full id
// (<instance>.<role>.<rank-key>, as `rankstat ranks` prints it) or any unambiguous shorter form: the
// rank key alone ("tp0-pp0-ep0-dp3"), or <instance>.<rank-key>.
#pragma once

#include <boost/json/object.hpp>

#include <string>
#include <vector>

namespace rankstat::cli {

// Characters a rank id can contain; anything else cannot name a rank (and is never sent in a URL).
bool is_plausible_rank_id(const std::string& text);

struct RankMatch {
  std::vector<std::string> ids;  // one: found; none: no such rank; several: ambiguous
};

// Matches `wanted` against the "ranks" of a ranks document.
RankMatch match_rank(const boost::json::object& ranks_document, const std::string& wanted);

}  // namespace rankstat::cli
