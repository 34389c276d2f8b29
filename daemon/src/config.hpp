// Every rankstatd setting, in one place. Flags follow the Prometheus exporter conventions
// (--web.listen-address, --web.telemetry-path, --log.level).
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace rankstat {

struct Config {
  std::vector<std::string> listen_addresses{":9473"};  // --web.listen-address, repeatable
  std::string telemetry_path = "/metrics";
  std::string address_file;  // written with the bound address once listening (for scripts and tests)
  std::uint32_t max_connections = 64;
  std::string shm_dir = "/dev/shm";
  std::vector<std::string> instances;  // empty: every instance
  // Bounds of the paced drain timer (poll_pacer.hpp): fastest while rings fill quickly, slowest while
  // they stay nearly empty. Equal bounds give a fixed interval.
  std::chrono::milliseconds poll_interval{2};
  std::chrono::milliseconds poll_interval_max{100};
  std::chrono::milliseconds scan_interval{1000};
  std::chrono::milliseconds liveness_interval{250};
  std::chrono::milliseconds stall_after{30000};
  // How long a dead or closed generation's per-pid series and mapping are kept before its totals are
  // folded into the retired totals and its segment is let go.
  std::chrono::milliseconds dead_grace{300000};
  std::string state_dir;       // where retired totals persist across daemon restarts; empty: memory only
  std::string instance_label;  // label carrying the engine instance id on every engine series; empty: none
  // Operator-set labels added to every engine series (--label.NAME=VALUE, RANKSTAT_LABEL_NAME=VALUE): the
  // fleet identity of this daemon's engines (cluster, deployment, node, ...; docs/operations.md "Fleet").
  // Fixed at start: a change would fork every series.
  std::map<std::string, std::string> constant_labels;
  std::string log_level = "info";
  int gzip_level = 1;
  // Whole-request deadline per HTTP connection (slowloris defence).
  std::chrono::milliseconds read_timeout{10000};
  // Deadline for complete request headers, from a request's first byte (from accept for the first).
  std::chrono::milliseconds header_timeout{5000};
  // Open HTTP connections per peer address (an IPv6 peer is its /64); 0 = no limit.
  std::uint32_t max_connections_per_peer = 8;
  // Segment trust (docs/reliability.md): owners besides the daemon's own uid and root, as given (user
  // names or numeric uids, "any" for every owner), resolved into allowed_uids / any_owner.
  std::vector<std::string> allowed_owners;
  std::vector<std::uint32_t> allowed_uids;
  bool any_owner = false;
  bool allow_world_writable = false;
  // Per-instance trust (--shm.instance-owner=INSTANCE=USER[:USER...], repeatable): an instance listed
  // here is accepted only from these owners (and root); resolved from instance_owner_specs.
  std::vector<std::string> instance_owner_specs;
  std::map<std::string, std::vector<std::uint32_t>> instance_owners;
  // Series read per segment generation at most; beyond it they are dropped and counted.
  std::uint32_t max_series_per_segment = 100000;
  std::string config_file;  // re-read on SIGHUP; holds flag=value lines
  // Gauge families integrated over time, with window extrema (docs/metrics.md, "Between scrapes");
  // "none" (or empty) turns the feature off. Fixed at start: a change would start or end counters.
  std::vector<std::string> integrate_families;
  bool integrate_default = true;  // --aggregate.integrate not given: the built-in list
  // Trailing window of the _window_max / _window_min gauges; 0: none exported.
  std::chrono::milliseconds peak_window{15000};
  // exporter-toolkit web config (TLS, basic auth, response headers); re-read on SIGHUP. Empty: plain HTTP.
  std::string web_config_file;
  // Serve on the sockets systemd passes (rankstatd.socket) instead of --web.listen-address.
  bool systemd_socket = false;
  // Whether /healthz and /readyz need the basic-auth credentials too (open by default: probes have none).
  bool probes_require_auth = false;
};

struct ConfigParse {
  std::optional<Config> config;  // empty when the program should exit (help, version or error)
  int exit_code = 0;
  std::string message;  // help text or error
};

// Parses the command line; a --config.file adds `name = value` lines (flags given on the command line win).
ConfigParse parse_config(int argc, const char* const* argv);

// Re-reads the config file for SIGHUP: settings that can change without a restart (log level, poll
// and liveness intervals, stall threshold, instances) are taken from it over `base`.
std::optional<Config> reload_config(const Config& base, std::string& error);

}  // namespace rankstat
