#include "app.hpp"

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <boost/json/serialize.hpp>
#include <cstdlib>
#include <fstream>
#include <iostream>

#include "address.hpp"
#include "format.hpp"
#include "rank_lookup.hpp"
#include "rankstat/flags/duration.hpp"
#include "rankstat/flags/user.hpp"
#include "render.hpp"
#include "source.hpp"
#include "top.hpp"

namespace rankstat::cli {
namespace {

// The shared flag grammar (rankstat/flags/duration.hpp); a bare number is seconds, as in top -d and
// watch -n. Every CLI duration must be positive.
std::chrono::milliseconds parse_duration(const std::string& text) {
  return flags::parse_duration(text, flags::BareNumber::kSeconds)
      .value.value_or(std::chrono::milliseconds(0));
}

std::string check_duration(const std::string& text) {
  const flags::DurationParse parsed = flags::parse_duration(text, flags::BareNumber::kSeconds);
  if (!parsed.value) return parsed.error;
  if (parsed.value->count() <= 0) return "'" + text + "' is not a positive duration (e.g. 500ms, 2s, 1m)";
  return {};
}

struct Options {
  std::string address = "127.0.0.1:9473";
  ClientSecurity security;
  std::string password_file;
  bool direct = false;
  std::string shm_dir = "/dev/shm";
  std::string stall_after = "30s";
  std::string timeout = "5s";
  bool json = false;
  std::vector<std::string> instances;
  std::vector<std::string> allowed_uids;  // --direct: owners trusted besides this user and root
  // show
  std::string rank;
  // top
  std::string interval = "1s";
  int iterations = 0;
  std::string sort = "id";
  bool reverse = false;
};

bool use_color() {
  // NOLINTNEXTLINE(concurrency-mt-unsafe): the CLI reads its environment on its only thread
  const char* no_color = std::getenv("NO_COLOR");
  return ::isatty(STDOUT_FILENO) != 0 && (no_color == nullptr || no_color[0] == '\0');
}

void print_lines(const std::vector<StyledLine>& lines) {
  const bool color = use_color();
  for (const StyledLine& line : lines) std::cout << line.render(color) << "\n";
  std::cout.flush();
}

void print_json(const boost::json::value& doc) {
  std::cout << boost::json::serialize(doc) << std::endl;
}

// The basic-auth password: the first line of `file`, else $RANKSTAT_PASSWORD. Never a flag value, which
// `ps` would show to every user.
std::string read_password(const std::string& file) {
  if (file.empty()) {
    // NOLINTNEXTLINE(concurrency-mt-unsafe): the CLI reads its environment on its only thread
    const char* from_environment = std::getenv("RANKSTAT_PASSWORD");
    if (from_environment == nullptr) {
      throw CLI::ValidationError("--user",
                                 "needs --password-file (or RANKSTAT_PASSWORD_FILE, RANKSTAT_PASSWORD)");
    }
    return from_environment;
  }
  std::ifstream in(file);
  std::string password;
  if (!in || !std::getline(in, password))
    throw CLI::ValidationError("--password-file", "cannot read " + file);
  while (!password.empty() && (password.back() == '\r' || password.back() == ' ')) password.pop_back();
  return password;
}

std::unique_ptr<RankSource> make_source(const Options& o) {
  if (o.direct) {
    DirectOptions d;
    d.shm_dir = o.shm_dir.empty() ? "/dev/shm" : o.shm_dir;
    d.stall_after = parse_duration(o.stall_after);
    for (const std::string& owner : o.allowed_uids) {
      if (owner.empty()) continue;
      if (const auto uid = flags::resolve_uid(owner)) {
        d.trusted_uids.push_back(*uid);
      } else {
        throw CLI::ValidationError("--allowed-uids",
                                   "'" + owner + "' is neither a user name nor a numeric uid");
      }
    }
    return make_direct_source(d);
  }
  std::string error;
  auto endpoint = parse_address(o.address, error);
  if (!endpoint) throw CLI::ValidationError("--address", error);
  DaemonOptions d;
  d.endpoint = *endpoint;
  d.timeout = parse_duration(o.timeout);
  d.security = o.security;
  if (!o.security.username.empty()) d.security.password = read_password(o.password_file);
  return make_daemon_source(d);
}

void keep_instances(boost::json::object& doc, const std::vector<std::string>& instances) {
  if (instances.empty()) return;
  auto* ranks = doc.if_contains("ranks");
  if (ranks == nullptr || !ranks->is_array()) return;
  boost::json::array kept;
  for (auto& r : ranks->as_array()) {
    const std::string instance = string_at(r, {"instance"});
    if (std::find(instances.begin(), instances.end(), instance) != instances.end())
      kept.emplace_back(std::move(r));
  }
  *ranks = std::move(kept);
}

int command_ranks(RankSource& source, const Options& o) {
  boost::json::object doc = source.ranks();
  keep_instances(doc, o.instances);
  if (o.json) {
    print_json(doc);
  } else {
    print_lines(render_ranks(doc));
  }
  return kExitOk;
}

int command_show(RankSource& source, const Options& o) {
  if (!is_plausible_rank_id(o.rank)) {
    std::cerr << "rankstat: no rank '" << o.rank << "': rank ids are <instance>.<role>.<rank-key>\n";
    return kExitNotFound;
  }
  std::optional<boost::json::object> detail;
  if (std::count(o.rank.begin(), o.rank.end(), '.') >= 2) detail = source.rank(o.rank);
  if (!detail) {
    const RankMatch match = match_rank(source.ranks(), o.rank);
    if (match.ids.size() > 1) {
      std::cerr << "rankstat: '" << o.rank << "' matches " << match.ids.size()
                << " ranks; give the full id:\n";
      for (const auto& id : match.ids) std::cerr << "  " << id << "\n";
      return kExitNotFound;
    }
    if (match.ids.size() == 1) detail = source.rank(match.ids.front());
  }
  if (!detail) {
    std::cerr << "rankstat: no rank '" << o.rank << "' (`rankstat ranks` lists them)\n";
    return kExitNotFound;
  }
  if (o.json) {
    print_json(*detail);
  } else {
    print_lines(render_rank(*detail));
  }
  return kExitOk;
}

int command_top(RankSource& source, const Options& o) {
  TopOptions t;
  t.interval = parse_duration(o.interval);
  t.iterations = o.iterations;
  t.sort = *sort_key_from_name(o.sort);
  t.reverse = o.reverse;
  t.json = o.json;
  t.color = use_color();
  t.instances = o.instances;
  return run_top(source, t);
}

}  // namespace

int run(int argc, char** argv) {
  Options o;
  CLI::App app{
      "rankstat: live views of the SGLang ranks that report through rankstat.\n"
      "Reads rankstatd's JSON API, or with --direct the shared-memory segments themselves (read-only)."};
  app.set_version_flag("--version", std::string("rankstat ") + RANKSTAT_VERSION);
  app.require_subcommand(1);
  app.fallthrough();  // the common options work before and after the command
  app.footer(
      "Exit codes: 0 ok, 1 runtime error, 2 usage error, 3 daemon unreachable (or no segments with "
      "--direct),\n"
      "4 no such rank. JSON schema: docs/api.md.");
  app.add_option("--address", o.address, "rankstatd's listen address, host:port or https://host:port")
      ->envname("RANKSTAT_ADDRESS")
      ->capture_default_str();
  app.add_option("--ca-file", o.security.ca_file,
                 "https: CA certificates to trust for the daemon's certificate (default: the system's)")
      ->envname("RANKSTAT_CA_FILE");
  app.add_option("--cert-file", o.security.cert_file,
                 "https: client certificate (PEM) for a daemon that asks for one")
      ->envname("RANKSTAT_CERT_FILE");
  app.add_option("--key-file", o.security.key_file, "https: the client certificate's key (PEM)")
      ->envname("RANKSTAT_KEY_FILE");
  app.add_option("--server-name", o.security.server_name,
                 "https: the name the daemon's certificate must carry (default: the --address host)")
      ->envname("RANKSTAT_SERVER_NAME");
  app.add_option("--user", o.security.username,
                 "Basic-auth user (basic_auth_users of the daemon's --web.config.file)")
      ->envname("RANKSTAT_USER");
  app.add_option("--password-file", o.password_file,
                 "File whose first line is the --user password; else $RANKSTAT_PASSWORD (never a flag: ps "
                 "shows flags)")
      ->envname("RANKSTAT_PASSWORD_FILE");
  app.add_flag("--direct", o.direct, "Read the segments in --shm-dir directly (read-only; no daemon needed)");
  app.add_option("--shm-dir", o.shm_dir, "Segment directory for --direct")
      ->envname("RANKSTAT_SHM_DIR")
      ->capture_default_str();
  app.add_option("--allowed-uids", o.allowed_uids,
                 "--direct: segment owners to trust besides this user and root (user names or uids, like "
                 "rankstatd's --shm.allowed-uids); others are shown marked untrusted")
      ->envname("RANKSTAT_ALLOWED_UIDS")
      ->delimiter(',');
  app.add_option("--stall-after", o.stall_after, "--direct: heartbeat age after which a live rank is STALLED")
      ->capture_default_str()
      ->check(check_duration);
  app.add_option("--timeout", o.timeout, "HTTP timeout per request")
      ->capture_default_str()
      ->check(check_duration);
  app.add_flag("--json", o.json, "Print JSON (schema in docs/api.md) instead of tables");
  app.add_option("--instance", o.instances, "Only ranks of this engine instance (repeatable)");

  auto* ranks =
      app.add_subcommand("ranks", "Every segment: identity, liveness, heartbeat, record rate, ring health");
  auto* show =
      app.add_subcommand("show", "The latest full snapshot of one rank, its counters and histograms");
  show->add_option("rank", o.rank, "Rank id (<instance>.<role>.<rank-key>) or an unambiguous rank key")
      ->required();
  auto* top = app.add_subcommand("top", "Live view, one row per rank (q quit, s sort, r reverse)");
  top->add_option("--interval,-d", o.interval, "Refresh interval")
      ->capture_default_str()
      ->check(check_duration);
  top->add_option("--iterations,-n", o.iterations, "Stop after this many refreshes (0: run until q)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  top->add_option("--sort", o.sort, "Initial sort column")
      ->capture_default_str()
      ->check(CLI::IsMember(sort_key_names()));
  top->add_flag("--reverse", o.reverse, "Reverse the sort order");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);  // prints help, version or the error
    return code == 0 ? kExitOk : kExitUsage;
  }
  try {
    auto source = make_source(o);
    if (ranks->parsed()) return command_ranks(*source, o);
    if (show->parsed()) return command_show(*source, o);
    if (top->parsed()) return command_top(*source, o);
    return kExitUsage;
  } catch (const CLI::ValidationError& e) {
    std::cerr << "rankstat: " << e.what() << "\n";
    return kExitUsage;
  } catch (const SourceUnavailable& e) {
    std::cerr << "rankstat: " << e.what() << "\n";
    return kExitUnavailable;
  } catch (const std::exception& e) {
    std::cerr << "rankstat: " << e.what() << "\n";
    return kExitRuntime;
  }
}

}  // namespace rankstat::cli
