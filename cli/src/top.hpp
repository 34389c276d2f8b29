// `rankstat top`: one row per rank, refreshed every --interval. Full screen on a terminal (keys: q
// quit, s next sort column, r reverse); one plain table per refresh when stdout is not a terminal;
// one JSON document per line and refresh with --json.
#pragma once

#include <boost/json/array.hpp>
#include <boost/json/object.hpp>

#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "source.hpp"

namespace rankstat::cli {

enum class SortKey { kId, kState, kRunning, kQueued, kKv, kGen, kSpec, kDp, kFwd, kHeartbeat };
inline constexpr int kSortKeyCount = 10;
std::string_view sort_key_name(SortKey key);
std::optional<SortKey> sort_key_from_name(std::string_view name);
std::vector<std::string> sort_key_names();

// What top shows of one rank, taken from its detail document.
struct TopRow {
  std::string id;
  std::string instance;
  std::string role;
  std::string state;
  std::optional<double> tp_rank, pp_rank, dp_rank;
  std::optional<double> running, queued;
  std::optional<double> kv_used, kv_evictable, kv_available;
  std::optional<double> token_usage;
  std::optional<double> gen_throughput;
  std::optional<double> spec_accept_length;
  std::optional<double> dp_imbalance;   // load (KV tokens in use) over the mean of its DP peers
  std::optional<double> fwd_occupancy;  // percent
  std::optional<double> heartbeat_age;
};

// Rows for the detail documents, with dp_imbalance filled in, sorted.
std::vector<TopRow> make_rows(const boost::json::array& details, SortKey sort, bool reverse);
boost::json::object row_json(const TopRow& row);

struct TopOptions {
  std::chrono::milliseconds interval{1000};
  int iterations = 0;  // 0: until q, Ctrl-C or SIGTERM
  SortKey sort = SortKey::kId;
  bool reverse = false;
  bool json = false;
  bool color = true;                   // on a terminal, unless NO_COLOR
  std::vector<std::string> instances;  // empty: every instance
};

// Runs the view; returns the process exit code (0, or 1/3 when the first refresh fails).
int run_top(RankSource& source, const TopOptions& options);

}  // namespace rankstat::cli
