#include "config.hpp"

#include <unistd.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <set>
#include <sstream>
#include <string_view>

#include "family_set.hpp"
#include "gauge_integral.hpp"
#include "rankstat/flags/duration.hpp"
#include "rankstat/flags/user.hpp"
#include "rankstat/shmproto/cumulative.hpp"
#include "rankstat/shmproto/naming.hpp"

namespace rankstat {

namespace {

struct DurationFlags {
  std::string poll = "2ms";
  std::string poll_max = "100ms";
  std::string scan = "1s";
  std::string liveness = "250ms";
  std::string stall = "30s";
  std::string dead_grace = "5m";
  std::string read_timeout = "10s";
  std::string header_timeout = "5s";
  std::string peak_window = "15s";
};

std::optional<std::string> apply_instance_owners(Config& c) {
  c.instance_owners.clear();
  for (const std::string& spec : c.instance_owner_specs) {
    const auto equals = spec.find('=');
    const std::string instance = spec.substr(0, equals);
    if (equals == std::string::npos || !shm::is_valid_name_component(instance) || equals + 1 == spec.size()) {
      return "--shm.instance-owner: '" + spec + "' is not INSTANCE=USER[:USER...]";
    }
    std::stringstream owners(spec.substr(equals + 1));
    std::string owner;
    auto& uids = c.instance_owners[instance];
    while (std::getline(owners, owner, ':')) {
      const auto uid = flags::resolve_uid(owner);
      if (!uid) return "--shm.instance-owner: '" + owner + "' is neither a user name nor a numeric uid";
      uids.push_back(*uid);
    }
  }
  return std::nullopt;
}

std::optional<std::string> apply_owners(Config& c) {
  if (auto error = apply_instance_owners(c)) return error;
  c.allowed_uids.clear();
  c.any_owner = false;
  for (const std::string& list : c.allowed_owners) {
    std::stringstream items(list);
    std::string owner;
    while (std::getline(items, owner, ',')) {
      if (owner.empty()) continue;
      if (owner == "any") {
        c.any_owner = true;
        continue;
      }
      const auto uid = flags::resolve_uid(owner);
      if (!uid) return "--shm.allowed-uids: '" + owner + "' is neither a user name nor a numeric uid";
      c.allowed_uids.push_back(*uid);
    }
  }
  return std::nullopt;
}

constexpr std::string_view kLabelFlagPrefix = "--label.";
constexpr std::string_view kLabelKeyPrefix = "label.";
constexpr std::string_view kLabelEnvPrefix = "RANKSTAT_LABEL_";

// The NAMEs of the constant labels given as --label.NAME flags on the command line and as label.NAME
// keys in the --config.file. CLI11 has no wildcard options, so each one gets its own option before
// parsing; flags and file are then read as for any option (the command line wins). --label.instance
// is not one: it names the label that carries the engine instance id.
std::set<std::string> constant_label_names(int argc, const char* const* argv) {
  std::set<std::string> names;
  std::string config_file;
  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    if (arg.starts_with(kLabelFlagPrefix)) {
      arg.remove_prefix(kLabelFlagPrefix.size());
      names.emplace(arg.substr(0, arg.find('=')));
    } else if (arg.starts_with("--config.file=")) {
      config_file = arg.substr(std::string_view("--config.file=").size());
    } else if (arg == "--config.file" && i + 1 < argc) {
      config_file = argv[i + 1];
    }
  }
  if (!config_file.empty()) {
    std::ifstream in(config_file);
    std::string line;
    while (std::getline(in, line)) {
      const auto start = line.find_first_not_of(" \t");
      if (start == std::string::npos || line.compare(start, kLabelKeyPrefix.size(), kLabelKeyPrefix) != 0)
        continue;
      const auto name_start = start + kLabelKeyPrefix.size();
      const auto name_end = line.find_first_of(" \t=", name_start);
      names.emplace(
          line.substr(name_start, name_end == std::string::npos ? name_end : name_end - name_start));
    }
  }
  names.erase("instance");
  return names;
}

// Adds RANKSTAT_LABEL_<NAME>=VALUE environment variables (NAME lower-cased: node_rank from
// RANKSTAT_LABEL_NODE_RANK) as constant labels, so that a Kubernetes downward API or a systemd
// EnvironmentFile can set them; a flag or config-file key of the same name wins. Then checks every
// constant label: an error names the label and where it came from.
std::optional<std::string> apply_constant_labels(Config& c, const std::set<std::string>& from_flags) {
  for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry) {
    const std::string_view variable = *entry;
    if (!variable.starts_with(kLabelEnvPrefix)) continue;
    const auto equals = variable.find('=');
    if (equals == std::string_view::npos) continue;
    std::string name(variable.substr(kLabelEnvPrefix.size(), equals - kLabelEnvPrefix.size()));
    std::transform(name.begin(), name.end(), name.begin(),
                   [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
    c.constant_labels.try_emplace(name, variable.substr(equals + 1));
  }
  for (const auto& [name, value] : c.constant_labels) {
    std::string upper = name;
    std::transform(upper.begin(), upper.end(), upper.begin(),
                   [](unsigned char ch) { return static_cast<char>(std::toupper(ch)); });
    const std::string source =
        from_flags.contains(name) ? "--label." + name : std::string(kLabelEnvPrefix) + upper;
    if (const std::string why = constant_label_refusal(name, c.instance_label); !why.empty())
      return "constant label " + source + " refused: " + why;
    if (value.empty()) return "constant label " + source + " refused: empty value (Prometheus drops it)";
    if (!shm::is_valid_utf8(value)) return "constant label " + source + " refused: value is not UTF-8";
  }
  return std::nullopt;
}

void add_options(CLI::App& app, Config& c, DurationFlags& d, const std::set<std::string>& label_names = {}) {
  // Config-file keys are the flag names ("log.level = debug"); CLI11 would otherwise read the dot as a
  // section separator and silently ignore every key.
  app.get_config_formatter_base()->parentSeparator('/');
  app.add_option("--web.listen-address", c.listen_addresses,
                 "Address to listen on for HTTP: host:port or :port; repeatable (e.g. IPv4 and IPv6)")
      ->capture_default_str();
  app.add_option("--web.config.file", c.web_config_file,
                 "exporter-toolkit web config (TLS, client certificates, basic auth, headers); re-read on "
                 "SIGHUP");
  app.add_flag("--web.systemd-socket", c.systemd_socket,
               "Serve on the sockets systemd passes (rankstatd.socket) instead of --web.listen-address");
  app.add_flag("--web.probes-require-auth", c.probes_require_auth,
               "Ask /healthz and /readyz for the basic-auth credentials too (open by default)");
  app.add_option("--web.telemetry-path", c.telemetry_path, "Path under which to expose metrics")
      ->capture_default_str()
      ->check(
          [](const std::string& p) { return p.starts_with('/') ? std::string() : "must start with '/'"; });
  app.add_option("--web.address-file", c.address_file, "Write the bound listen address to this file");
  app.add_option("--web.max-connections", c.max_connections, "Concurrent HTTP connections")
      ->capture_default_str()
      ->check(CLI::Range(1u, 100000u));
  app.add_option("--web.max-connections-per-peer", c.max_connections_per_peer,
                 "Concurrent HTTP connections from one address (an IPv6 /64); 0 = no limit")
      ->capture_default_str();
  app.add_option("--shm.dir", c.shm_dir, "Directory holding the rank segments")->capture_default_str();
  app.add_option("--shm.instance", c.instances, "Only serve these engine instances (repeatable)");
  app.add_option("--shm.poll-interval", d.poll,
                 "Fastest drain interval, used while rings fill quickly or a writer drops records")
      ->capture_default_str();
  app.add_option("--shm.poll-interval-max", d.poll_max,
                 "Slowest drain interval, used while rings stay nearly empty (scrapes drain first)")
      ->capture_default_str();
  app.add_option("--shm.scan-interval", d.scan,
                 "How often the shm directory is rescanned (inotify is a hint)")
      ->capture_default_str();
  app.add_option("--liveness.interval", d.liveness, "How often rank processes are checked")
      ->capture_default_str();
  app.add_option("--liveness.stall-after", d.stall, "Heartbeat age after which a live rank is STALLED")
      ->capture_default_str();
  app.add_option("--liveness.dead-grace", d.dead_grace,
                 "How long a dead rank's per-process series stay before its totals are retired")
      ->capture_default_str();
  app.add_option("--state.dir", c.state_dir,
                 "Directory where retired ranks' totals persist across restarts (systemd StateDirectory)");
  app.add_option(
         "--label.instance", c.instance_label,
         "Add this label with the engine instance id to every engine series (several engines per host)")
      ->check([](const std::string& name) {
        // Classic only, like constant labels: an operator's name, on every engine series.
        return shm::is_classic_label_name(name) && !name.starts_with("__")
                   ? std::string()
                   : "not a classic Prometheus label name ([a-zA-Z_][a-zA-Z0-9_]*, no __ prefix)";
      });
  for (const std::string& name : label_names) {
    app.add_option(std::string(kLabelFlagPrefix) + name, c.constant_labels[name],
                   "Constant label on every engine series");
  }
  app.add_option("--log.level", c.log_level, "trace, debug, info, warn, error")
      ->capture_default_str()
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "critical", "off"}));
  app.add_option("--web.gzip-level", c.gzip_level, "zlib level for gzip responses (1 = fastest)")
      ->capture_default_str()
      ->check(CLI::Range(1, 9));
  app.add_option("--web.read-timeout", d.read_timeout,
                 "Deadline for a client to send a whole request; slower connections are closed")
      ->capture_default_str();
  app.add_option("--web.header-timeout", d.header_timeout,
                 "Deadline for a client to send complete request headers; slower connections are closed")
      ->capture_default_str();
  app.add_option("--shm.allowed-uids", c.allowed_owners,
                 "Segment owners to accept besides this daemon's user and root: user names or uids, comma "
                 "separated or repeated; 'any' accepts every owner")
      ->delimiter(',');
  app.add_flag("--shm.allow-world-writable", c.allow_world_writable,
               "Accept segments that any local user may write (refused by default)");
  app.add_option("--shm.instance-owner", c.instance_owner_specs,
                 "INSTANCE=USER[:USER...]: only these owners (and root) may publish segments of INSTANCE; "
                 "repeatable. Other instances keep the --shm.allowed-uids rule");
  app.add_option("--aggregate.integrate", c.integrate_families,
                 "Gauge families to integrate over time and track over --aggregate.peak-window, comma "
                 "separated; 'none' turns it off (default: SGLang's and vLLM's queue and KV usage gauges)")
      ->delimiter(',')
      ->each([&c](const std::string&) { c.integrate_default = false; });
  app.add_option("--aggregate.peak-window", d.peak_window,
                 "Trailing window of the <gauge>_window_max and _window_min gauges; 0 exports none")
      ->capture_default_str();
  app.add_option("--shm.max-series-per-segment", c.max_series_per_segment,
                 "Series read from one segment at most; the rest are dropped and counted")
      ->capture_default_str()
      ->check(CLI::Range(1u, 1u << 20));
}

// A daemon flag's duration: the shared grammar, but a bare number other than 0 is refused (it meant
// milliseconds before the grammar was shared; now it would mean seconds, so neither is guessed).
std::optional<std::string> apply_duration(std::string_view flag, const std::string& text, bool zero_allowed,
                                          std::chrono::milliseconds& out) {
  const flags::DurationParse parsed = flags::parse_duration(text, flags::BareNumber::kOnlyZero);
  if (!parsed.value) return std::string(flag) + ": " + parsed.error;
  if (parsed.value->count() == 0 && !zero_allowed)
    return std::string(flag) + ": '" + text + "' is not a positive duration (write e.g. 5ms, 1s, 2m)";
  out = *parsed.value;
  return std::nullopt;
}

std::optional<std::string> apply_durations(Config& c, const DurationFlags& d) {
  struct Item {
    std::string_view flag;
    const std::string& text;
    std::chrono::milliseconds& out;
    bool zero_allowed;
  };
  const Item items[] = {
      {"--shm.poll-interval", d.poll, c.poll_interval, false},
      {"--shm.poll-interval-max", d.poll_max, c.poll_interval_max, false},
      {"--shm.scan-interval", d.scan, c.scan_interval, false},
      {"--liveness.interval", d.liveness, c.liveness_interval, false},
      {"--liveness.stall-after", d.stall, c.stall_after, false},
      {"--liveness.dead-grace", d.dead_grace, c.dead_grace, true},
      {"--web.read-timeout", d.read_timeout, c.read_timeout, false},
      {"--web.header-timeout", d.header_timeout, c.header_timeout, false},
      {"--aggregate.peak-window", d.peak_window, c.peak_window, true},  // 0: no window gauges
  };
  for (const Item& item : items) {
    if (auto error = apply_duration(item.flag, item.text, item.zero_allowed, item.out)) return error;
  }
  if (c.integrate_default) {
    c.integrate_families = default_integrated_families();
  } else {
    std::erase_if(c.integrate_families, [](const std::string& f) { return f.empty() || f == "none"; });
    for (const std::string& family : c.integrate_families) {
      if (!shm::is_valid_metric_name(family))
        return "--aggregate.integrate: '" + family + "' is not a metric name";
    }
  }
  if (c.poll_interval_max < c.poll_interval) {
    return "--shm.poll-interval-max (" + d.poll_max + ") is shorter than --shm.poll-interval (" + d.poll +
           ")";
  }
  return std::nullopt;
}

}  // namespace

ConfigParse parse_config(int argc, const char* const* argv) {
  ConfigParse result;
  Config c;
  DurationFlags d;
  CLI::App app{"rankstatd: drains rankstat shared-memory rings and serves Prometheus metrics"};
  app.set_version_flag("--version", std::string("rankstatd ") + RANKSTAT_VERSION);
  app.set_config("--config.file", "", "Read flags from this file (name = value lines); re-read on SIGHUP");
  const std::set<std::string> label_names = constant_label_names(argc, argv);
  for (const std::string& name : label_names) {
    // CLI11 accepts only some characters in an option name; a bad one is refused as a label name here.
    if (const std::string why = constant_label_refusal(name, ""); !shm::is_classic_label_name(name)) {
      result.exit_code = 2;
      result.message = "constant label --label." + name + " refused: " + why + "\n";
      return result;
    }
  }
  add_options(app, c, d, label_names);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    std::ostringstream out;
    std::ostringstream err;
    result.exit_code = app.exit(e, out, err);
    result.message = out.str() + err.str();
    return result;
  }
  if (auto* opt = app.get_config_ptr(); opt != nullptr && opt->count() > 0)
    c.config_file = opt->as<std::string>();
  if (auto error = apply_durations(c, d)) {
    result.exit_code = 2;
    result.message = *error + "\n";
    return result;
  }
  if (auto error = apply_owners(c)) {
    result.exit_code = 2;
    result.message = *error + "\n";
    return result;
  }
  std::set<std::string> from_flags;
  for (const std::string& name : label_names) {
    if (app.count(std::string(kLabelFlagPrefix) + name) == 0) {
      c.constant_labels.erase(name);  // a label.NAME line that CLI11 did not read as a key
    } else {
      from_flags.insert(name);
    }
  }
  if (auto error = apply_constant_labels(c, from_flags)) {
    result.exit_code = 2;
    result.message = *error + "\n";
    return result;
  }
  result.config = c;
  return result;
}

std::optional<Config> reload_config(const Config& base, std::string& error) {
  if (base.config_file.empty()) return base;
  std::ifstream probe(base.config_file);
  if (!probe) {
    error = "cannot read " + base.config_file;
    return std::nullopt;
  }
  Config c = base;
  auto ms = [](std::chrono::milliseconds v) { return std::to_string(v.count()) + "ms"; };
  DurationFlags d{ms(base.poll_interval),     ms(base.poll_interval_max), ms(base.scan_interval),
                  ms(base.liveness_interval), ms(base.stall_after),       ms(base.dead_grace),
                  ms(base.read_timeout),      ms(base.header_timeout)};
  CLI::App app;
  app.allow_config_extras(CLI::config_extras_mode::ignore);
  app.set_config("--config.file", base.config_file);
  add_options(app, c, d);
  try {
    const char* argv[] = {"rankstatd"};
    app.parse(1, argv);
  } catch (const CLI::ParseError& e) {
    error = std::string("config file ") + base.config_file + ": " + e.what();
    return std::nullopt;
  }
  if (auto message = apply_durations(c, d)) {
    error = *message;
    return std::nullopt;
  }
  if (auto message = apply_owners(c)) {
    error = *message;
    return std::nullopt;
  }
  // The listener and the shm directory stay as started: changing them needs a restart.
  c.listen_addresses = base.listen_addresses;
  c.web_config_file = base.web_config_file;
  c.systemd_socket = base.systemd_socket;
  c.probes_require_auth = base.probes_require_auth;
  c.telemetry_path = base.telemetry_path;
  c.shm_dir = base.shm_dir;
  c.address_file = base.address_file;
  c.max_connections = base.max_connections;
  c.read_timeout = base.read_timeout;
  c.header_timeout = base.header_timeout;
  c.max_connections_per_peer = base.max_connections_per_peer;
  c.state_dir = base.state_dir;
  c.instance_label = base.instance_label;
  c.constant_labels = base.constant_labels;
  c.integrate_families = base.integrate_families;
  c.integrate_default = base.integrate_default;
  c.peak_window = base.peak_window;
  return c;
}

}  // namespace rankstat
