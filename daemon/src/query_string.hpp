// Request targets ("/metrics?name%5B%5D=a&self_metrics=false"): every route reads its path and query
// parameters through here, so percent-decoding and the rules for odd pairs are written once.
//
// Threading contract: pure functions of their arguments.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace rankstat {

struct QueryParam {
  std::string key;
  std::string value;
};

// The path of a request target: everything before the first '?'.
std::string_view target_path(std::string_view target);

// The query string's parameters in the order sent, keys and values decoded as
// application/x-www-form-urlencoded ("+" is a space, "%XX" a byte; a malformed escape stays as written,
// as prometheus_client leaves it). A pair without '=' has an empty value; empty pairs are skipped.
std::vector<QueryParam> query_params(std::string_view target);

// True when the query holds `key=1` or `key=true`.
bool query_flag(std::string_view target, std::string_view key);

}  // namespace rankstat
