#include "daemon.hpp"

#include <spdlog/spdlog.h>
#include <sys/inotify.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/json/serialize.hpp>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>

#include "aggregation.hpp"
#include "api_json.hpp"
#include "http/basic_auth.hpp"
#include "http/gzip.hpp"
#include "http/http_server.hpp"
#include "http/systemd_notify.hpp"
#include "http/web_config.hpp"
#include "poll_pacer.hpp"
#include "process_metrics.hpp"
#include "rankstat/shmproto/process.hpp"
#include "rankstat/shmproto/schema.hpp"
#include "retired_totals.hpp"
#include "scrape_filter.hpp"
#include "segment_registry.hpp"
#include "self_metrics.hpp"
#include "text_exposition.hpp"

namespace rankstat {
namespace {

namespace asio = boost::asio;

constexpr std::string_view kTextContentType = "text/plain; version=0.0.4; charset=utf-8";

http::Response text_response(unsigned status, std::string body) {
  http::Response r;
  r.status = status;
  r.content_type = "text/plain; charset=utf-8";
  r.body = std::move(body);
  return r;
}

http::Response json_response(unsigned status, std::string body) {
  http::Response r;
  r.status = status;
  r.content_type = "application/json";
  r.body = std::move(body);
  r.compressible = true;
  return r;
}

std::string landing_page(const std::string& telemetry_path) {
  return "<!DOCTYPE html>\n<html><head><title>rankstatd</title></head><body>\n"
         "<h1>rankstatd</h1>\n<p>SGLang rank metrics from shared memory.</p>\n<ul>\n"
         "<li><a href=\"" +
         telemetry_path +
         "\">Metrics</a></li>\n"
         "<li><a href=\"/api/v1/ranks\">Ranks (JSON)</a></li>\n"
         "<li><a href=\"/healthz\">Health</a></li>\n"
         "<li><a href=\"/readyz\">Readiness</a></li>\n"
         "</ul>\n</body></html>\n";
}

std::string path_of(const std::string& target) {
  return target.substr(0, target.find('?'));
}

// True when the query string of `target` holds `name=1` or `name=true`.
bool query_flag(const std::string& target, std::string_view name) {
  const auto question = target.find('?');
  if (question == std::string::npos) return false;
  std::string_view query = std::string_view(target).substr(question + 1);
  while (!query.empty()) {
    const auto amp = query.find('&');
    const std::string_view pair = query.substr(0, amp);
    if (pair.size() > name.size() && pair.starts_with(name) && pair[name.size()] == '=') {
      const std::string_view value = pair.substr(name.size() + 1);
      if (value == "1" || value == "true") return true;
    }
    if (amp == std::string_view::npos) break;
    query.remove_prefix(amp + 1);
  }
  return false;
}

RegistryOptions registry_options(const Config& c) {
  RegistryOptions o;
  o.directory = c.shm_dir;
  o.instances = c.instances;
  o.instance_label = c.instance_label;
  o.dead_grace = c.dead_grace;
  o.allowed_uids = c.allowed_uids;
  o.any_owner = c.any_owner;
  o.allow_world_writable = c.allow_world_writable;
  o.instance_owners = c.instance_owners;
  o.max_series_per_segment = c.max_series_per_segment;
  o.integrals.families.insert(c.integrate_families.begin(), c.integrate_families.end());
  o.integrals.peak_window_ns = static_cast<std::uint64_t>(c.peak_window.count()) * 1'000'000ull;
  return o;
}

// A pidfd for `pid` that is known to refer to the process that started at `start_ticks`, or -1.
int open_verified_pidfd(std::uint32_t pid, std::uint64_t start_ticks) {
#ifdef SYS_pidfd_open
  const auto fd = static_cast<int>(::syscall(SYS_pidfd_open, static_cast<pid_t>(pid), 0));
  if (fd < 0) return -1;
  // The pid may have been reused between the segment's creation and now: only a pidfd opened while
  // the start time still matches watches the right process.
  if (shm::process_start_ticks(pid) != start_ticks) {
    ::close(fd);
    return -1;
  }
  return fd;
#else
  (void)pid;
  (void)start_ticks;
  return -1;
#endif
}

}  // namespace

struct Daemon::State {
  Config config;
  asio::io_context io;
  RetiredTotals retired;
  SegmentRegistry registry;
  SelfMetrics self;
  PollPacer pacer{config.poll_interval, config.poll_interval_max};
  std::unique_ptr<http::Server> server;
  asio::steady_timer poll_timer{io};
  asio::steady_timer liveness_timer{io};
  asio::steady_timer scan_timer{io};
  asio::steady_timer watchdog_timer{io};
  asio::steady_timer shutdown_deadline{io};
  asio::steady_timer idle_check{io};
  asio::signal_set stop_signals{io, SIGTERM, SIGINT};
  asio::signal_set reload_signals{io, SIGHUP};
  std::optional<asio::posix::stream_descriptor> inotify;
  std::array<char, 4096> inotify_buffer{};
  bool rescan_pending = false;
  // The exposition is kept between scrapes: series storage and pre-rendered sample heads (FamilySet), and
  // the compressed form of every family, re-deflated only when its text changed (ChunkedGzip).
  FamilySet engine;
  exposition::ChunkedGzip gzip{1};
  std::size_t last_body_bytes = 0;
  // The plain body of the last uncompressed scrape, rendered into again once no connection is still
  // sending it: at 32 ranks it is 1.7 MB, which a fresh allocation would page-fault in on every scrape.
  std::shared_ptr<std::string> plain_body;
  std::vector<std::size_t> body_family_ends;
  bool stopping = false;
  bool collision_logged = false;    // the instance-collision warning is logged once per daemon
  bool unexposable_logged = false;  // likewise the unexposable-labels warning
  bool shadowed_logged = false;     // likewise the constant-label shadowing warning
  bool checkpoint_error_logged = false;
  std::optional<std::chrono::microseconds> watchdog_period;
  // Exit notification per live writer process, keyed by (segment name, generation).
  std::map<std::pair<std::string, std::uint64_t>, std::unique_ptr<asio::posix::stream_descriptor>>
      exit_watches;
  // --web.config.file as last loaded (defaults: plain HTTP, no auth), replaced whole on SIGHUP; with the
  // basic-auth checker and rate-limit bucket built from it. Touched on the io thread only.
  std::shared_ptr<const http::WebConfig> web = std::make_shared<const http::WebConfig>();
  http::BasicAuth auth;
  double rate_tokens = 0;
  std::chrono::steady_clock::time_point rate_refilled = std::chrono::steady_clock::now();
  std::uint64_t auth_failures_missing = 0;
  std::uint64_t auth_failures_wrong = 0;
  std::uint64_t rate_limited = 0;
  std::size_t engine_families = 0;  // families of the last exposition that are the engine's (scrape filter)

  explicit State(Config c)
      : config(std::move(c)), retired(config.state_dir), registry(registry_options(config), retired) {
    Labels constant;
    for (const auto& [name, value] : config.constant_labels) constant.push_back({name, value});
    engine.set_constant_labels(std::move(constant));
  }

  // Watches every live writer we can see with a pidfd, so a crash is noticed at once rather than at the
  // next liveness pass.
  void watch_exits() {
    for (const RankSegment* s : registry.pid_watchable()) {
      auto key = std::make_pair(s->name(), s->identity().generation);
      if (exit_watches.count(key) != 0) continue;
      const int fd = open_verified_pidfd(s->identity().pid, s->identity().pid_start_ticks);
      if (fd < 0) {
        check_liveness_now();
        continue;
      }
      auto watch = std::make_unique<asio::posix::stream_descriptor>(io, fd);
      watch->async_wait(asio::posix::stream_descriptor::wait_read,
                        [this, key](const boost::system::error_code&) {
                          if (stopping) return;
                          // On an error too: without the watch, the /proc check takes over.
                          registry.set_exit_watched(key.first, key.second, false);
                          exit_watches.erase(key);
                          check_liveness_now();
                        });
      registry.set_exit_watched(key.first, key.second, true);
      exit_watches.emplace(std::move(key), std::move(watch));
    }
  }

  void check_liveness_now() {
    const std::uint64_t now = shm::monotonic_ns();
    registry.check_liveness(now, config.stall_after);
    registry.retire_expired(now);
  }

  void scan_now() {
    if (registry.scan(shm::monotonic_ns()) > 0 && !stopping) {
      pacer.hurry();
      start_poll();  // replaces the pending, possibly slow, wait
    }
    watch_exits();
  }

  // Every drain of all rings (timer, scrape, API) goes through here, so the pacer sees each fill.
  void drain_rings(std::uint64_t now_ns, bool from_timer) {
    // rankstat_records_drained_total is the registry's count, which includes the last drain of a
    // generation that died or closed.
    const DrainPass pass = registry.drain_all(now_ns);
    pacer.observe(now_ns, pass.fullest_fill, pass.drops, from_timer);
  }

  void start_poll() {
    const auto interval = pacer.interval();
    self.set_poll_interval(std::chrono::duration<double>(interval).count());
    poll_timer.expires_after(interval);
    poll_timer.async_wait([this](const boost::system::error_code& ec) {
      if (ec || stopping) return;
      drain_rings(shm::monotonic_ns(), true);
      start_poll();
    });
  }

  void start_liveness() {
    liveness_timer.expires_after(config.liveness_interval);
    liveness_timer.async_wait([this](const boost::system::error_code& ec) {
      if (ec || stopping) return;
      check_liveness_now();
      start_liveness();
    });
  }

  void start_scan() {
    scan_timer.expires_after(config.scan_interval);
    scan_timer.async_wait([this](const boost::system::error_code& ec) {
      if (ec || stopping) return;
      scan_now();
      start_scan();
    });
  }

  void start_inotify() {
    const int fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    if (fd < 0) {
      spdlog::warn("inotify unavailable ({}); relying on the {} ms rescan", shm::errno_text(errno),
                   config.scan_interval.count());
      return;
    }
    if (inotify_add_watch(fd, config.shm_dir.c_str(), IN_CREATE | IN_MOVED_TO | IN_DELETE | IN_CLOSE_WRITE) <
        0) {
      spdlog::warn("cannot watch {} ({}); relying on the periodic rescan", config.shm_dir,
                   shm::errno_text(errno));
      ::close(fd);
      return;
    }
    inotify.emplace(io, fd);
    wait_inotify();
  }

  void wait_inotify() {
    inotify->async_read_some(asio::buffer(inotify_buffer),
                             [this](const boost::system::error_code& ec, std::size_t) {
                               if (ec || stopping) return;
                               // The events are only a hint that the directory changed: coalesce a burst into
                               // one scan.
                               if (!rescan_pending) {
                                 rescan_pending = true;
                                 asio::post(io, [this] {
                                   rescan_pending = false;
                                   if (!stopping) scan_now();
                                 });
                               }
                               wait_inotify();
                             });
  }

  void start_watchdog() {
    watchdog_period = http::watchdog_interval();
    if (!watchdog_period) return;
    kick_watchdog();
  }

  void kick_watchdog() {
    // Fed from the io thread: a wedged loop stops the kicks and systemd restarts the daemon.
    http::notify_watchdog();
    watchdog_timer.expires_after(*watchdog_period);
    watchdog_timer.async_wait([this](const boost::system::error_code& ec) {
      if (!ec && !stopping) kick_watchdog();
    });
  }

  void start_signals() {
    stop_signals.async_wait([this](const boost::system::error_code& ec, int signo) {
      if (ec) return;
      spdlog::info("received signal {}, shutting down", signo);
      shutdown();
    });
    wait_reload();
  }

  void wait_reload() {
    reload_signals.async_wait([this](const boost::system::error_code& ec, int) {
      if (ec || stopping) return;
      http::notify_reloading();
      std::string error;
      const bool web_reloaded = reload_web_config();
      if (auto reloaded = reload_config(config, error)) {
        config = *reloaded;
        spdlog::set_level(spdlog::level::from_str(config.log_level));
        registry.set_instances(config.instances);
        registry.set_dead_grace(config.dead_grace);
        registry.set_trust(config.allowed_uids, config.any_owner, config.allow_world_writable,
                           config.instance_owners);
        registry.set_max_series_per_segment(config.max_series_per_segment);
        pacer.set_bounds(config.poll_interval, config.poll_interval_max);
        self.note_reload(web_reloaded);
        spdlog::info("configuration reloaded");
      } else {
        self.note_reload(false);
        spdlog::error("configuration reload failed, keeping the current one: {}", error);
      }
      http::notify_ready("serving");
      wait_reload();
    });
  }

  void shutdown() {
    if (stopping) return;
    stopping = true;
    http::notify_stopping();
    poll_timer.cancel();
    liveness_timer.cancel();
    scan_timer.cancel();
    watchdog_timer.cancel();
    reload_signals.cancel();
    stop_signals.cancel();
    if (inotify) inotify->close();
    exit_watches.clear();
    if (server) server->stop();  // the scrape in flight is finished first
    shutdown_deadline.expires_after(std::chrono::seconds(5));
    shutdown_deadline.async_wait([this](const boost::system::error_code& ec) {
      if (!ec) io.stop();
    });
    finish_when_idle();
  }

  // The pending deadline would otherwise keep io.run() busy for its full 5 s: cancel it as soon as the
  // last connection has closed, so SIGTERM exits right after the scrape in flight.
  void finish_when_idle() {
    if (!server || server->active_connections() == 0) {
      shutdown_deadline.cancel();
      return;
    }
    idle_check.expires_after(std::chrono::milliseconds(10));
    idle_check.async_wait([this](const boost::system::error_code& ec) {
      if (!ec) finish_when_idle();
    });
  }

  // Before any integral is served: a restarted daemon then continues from at least what was served.
  void save_integral_checkpoints() {
    if (!retired.persistent() || !registry.integrals().enabled()) return;
    std::string error;
    if (!retired.save_checkpoints(registry.integral_checkpoints(), registry.scanned_once(), error) &&
        !checkpoint_error_logged) {
      checkpoint_error_logged = true;  // once per daemon run; the next scrape tries again
      spdlog::error("integral checkpoint not saved (a daemon restart would restart the integrals): {}",
                    error);
    }
  }

  HttpCounters http_counters() const {
    HttpCounters c;
    if (server) {
      c.requests_total = server->requests_total();
      c.connections_rejected_total = server->connections_rejected_total();
      c.active_connections = server->active_connections();
      c.bad_requests_total = server->bad_requests_total();
      c.connections_refused_per_peer_total = server->connections_refused_per_peer_total();
      c.connections_evicted_idle_total = server->connections_evicted_idle_total();
      c.connections_evicted_reading_headers_total = server->connections_evicted_reading_headers_total();
      c.connections_evicted_reading_body_total = server->connections_evicted_reading_body_total();
      c.header_timeouts_total = server->header_timeouts_total();
      c.tls_handshake_failures_total = server->tls_handshake_failures_total();
    }
    c.auth_failures_missing_total = auth_failures_missing;
    c.auth_failures_wrong_total = auth_failures_wrong;
    c.rate_limited_total = rate_limited;
    return c;
  }

  // Writes the exposition into `body`; `family_ends` receives where each family ends (the gzip chunks).
  void render_metrics(std::string& body, std::vector<std::size_t>& family_ends) {
    const auto started = std::chrono::steady_clock::now();
    const std::uint64_t now_ns = shm::monotonic_ns();
    drain_rings(now_ns, false);  // freshest data for this scrape
    registry.refresh_cumulative();
    registry.settle_integrals(now_ns);
    CollectOptions options;
    options.instance_label = config.instance_label;
    options.now_ns = now_ns;
    options.dead_grace_ns = static_cast<std::uint64_t>(config.dead_grace.count()) * 1'000'000ull;
    options.integrals = &registry.integrals();
    collect_engine_metrics(registry.generations(), options, engine);
    save_integral_checkpoints();
    retired.contribute(engine);
    self.set_scrape_drops(engine.conflicts(), engine.collisions());
    self.set_unexposable_drops(engine.unexposable());
    if (engine.unexposable() != 0 && !unexposable_logged) {
      unexposable_logged = true;  // once per daemon run: the gauge tells whether it persists
      spdlog::warn(
          "{} samples dropped: their labels cannot be written correctly (invalid UTF-8, a reserved or "
          "repeated label name, e.g. in a segment's model_name or extra labels); the other samples are "
          "served (rankstat_scrape_unexposable_samples)",
          engine.unexposable());
    }
    self.set_shadowed_constant_labels(engine.shadowed_constant_labels());
    if (engine.shadowed_constant_labels() != 0 && !shadowed_logged) {
      shadowed_logged = true;
      spdlog::warn(
          "{} engine series carry a label named like a constant label (--label.NAME, RANKSTAT_LABEL_NAME): "
          "they keep the engine's value and go without the constant one; rename the constant label "
          "(rankstat_scrape_shadowed_constant_labels)",
          engine.shadowed_constant_labels());
    }
    if (engine.collisions() != 0 && !collision_logged) {
      collision_logged = true;
      spdlog::warn(
          "{} samples dropped: two engine instances export series with identical labels (the second "
          "instance's are left out); give each engine its own labels or start rankstatd with "
          "--label.instance=instance_id (rankstat_scrape_instance_collisions)",
          engine.collisions());
    }
    body.reserve(last_body_bytes + last_body_bytes / 8);
    // The engine families in prometheus_client's spelling (what engine.finish() gives through
    // exposition::serialize with Dialect::kPrometheusClient), then the self-metrics in prometheus-cpp's.
    engine.render(body, &family_ends);
    engine_families = family_ends.size();
    for (const prometheus::MetricFamily& family : self.collect(registry, http_counters(), now_ns)) {
      exposition::append_family(body, family);
      family_ends.push_back(body.size());
    }
    if (const auto stats = read_process_stats()) {
      for (const prometheus::MetricFamily& family : process_families(*stats)) {
        exposition::append_family(body, family);
        family_ends.push_back(body.size());
      }
    }
    last_body_bytes = body.size();
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    self.observe_scrape(seconds, body.size());
  }

  http::Response handle(const http::Request& request) {
    const std::string path = path_of(request.target);
    if (path == config.telemetry_path) {
      http::Response r;
      r.content_type = std::string(kTextContentType);
      if (const ScrapeFilter filter = parse_scrape_filter(request.target); filter.active()) {
        std::string full;
        std::vector<std::size_t> family_ends;
        render_metrics(full, family_ends);
        r.body = apply_scrape_filter(full, family_ends, engine_families, filter);
        r.compressible = true;
        return r;
      }
      std::vector<std::size_t>& family_ends = body_family_ends;
      family_ends.clear();
      if (http::accepts_gzip(request.accept_encoding)) {
        // Rendered into the compressor's own buffer: it compares each family with the previous body and
        // deflates only those that changed.
        std::string& body = gzip.next_body();
        render_metrics(body, family_ends);
        try {
          gzip.set_level(config.gzip_level);
          r.precompressed_gzip = gzip.compress(family_ends);
          return r;
        } catch (const std::exception& e) {
          spdlog::warn("gzip of /metrics failed, sending it uncompressed: {}", e.what());
          r.body = body;
          return r;
        }
      }
      if (plain_body == nullptr || plain_body.use_count() != 1) plain_body = std::make_shared<std::string>();
      plain_body->clear();
      render_metrics(*plain_body, family_ends);
      r.shared_body = plain_body;
      return r;
    }
    if (path == "/healthz") return text_response(200, "ok\n");
    if (path == "/readyz") {
      return registry.scanned_once() && !stopping ? text_response(200, "ready\n")
                                                  : text_response(503, "not ready\n");
    }
    if (path == "/") {
      http::Response r;
      r.content_type = "text/html; charset=utf-8";
      r.body = landing_page(config.telemetry_path);
      return r;
    }
    if (path == "/api/v1/ranks") {
      const std::uint64_t now_ns = shm::monotonic_ns();
      drain_rings(now_ns, false);
      const bool details = query_flag(request.target, "details");
      if (details) registry.refresh_cumulative();
      return json_response(200, ranks_json(registry, now_ns, details));
    }
    constexpr std::string_view kRankPrefix = "/api/v1/ranks/";
    if (path.starts_with(kRankPrefix)) {
      const std::string id = path.substr(kRankPrefix.size());
      const std::uint64_t now_ns = shm::monotonic_ns();
      drain_rings(now_ns, false);
      registry.refresh_cumulative();
      if (const RankSegment* s = registry.find_current(id)) {
        return json_response(200, boost::json::serialize(rank_detail_json(*s, now_ns)));
      }
      // Serialized, not pasted: the id comes from the request and may hold quotes or backslashes.
      return json_response(404, boost::json::serialize(boost::json::object{
                                    {"error", "no such rank"}, {"id", shm::replace_invalid_utf8(id)}}));
    }
    return text_response(404, "not found: try " + config.telemetry_path + "\n");
  }

  // Every request enters here: the web config's rate limit, then basic auth (the probes may stay open),
  // then the endpoints; the configured headers go on every answer, 401 and 429 included.
  http::Response handle_secured(const http::Request& request) {
    const std::string path = path_of(request.target);
    const bool open_probe =
        ((path == "/healthz" || path == "/readyz") && !config.probes_require_auth) ||
        std::find(web->basic_auth_excluded_paths.begin(), web->basic_auth_excluded_paths.end(), path) !=
            web->basic_auth_excluded_paths.end();
    http::Response response;
    if (!rate_allows()) {
      ++rate_limited;
      response = text_response(429, "Too Many Requests\n");
    } else if (!auth.enabled() || open_probe) {
      response = handle(request);
    } else {
      const http::AuthOutcome outcome = auth.check(request.authorization);
      if (outcome == http::AuthOutcome::kAccepted) {
        response = handle(request);
      } else {
        // Neither the header nor the user name is logged: either may be a password typed in the wrong place.
        ++(outcome == http::AuthOutcome::kMissing ? auth_failures_missing : auth_failures_wrong);
        spdlog::debug("HTTP request for {} refused: {} credentials", path.substr(0, 200),
                      outcome == http::AuthOutcome::kMissing ? "missing" : "wrong");
        response = text_response(401, "Unauthorized\n");
        response.extra_headers.emplace_back("WWW-Authenticate", std::string(http::BasicAuth::kChallenge));
      }
    }
    for (const auto& header : web->headers) response.extra_headers.push_back(header);
    return response;
  }

  // exporter-toolkit's rate_limit: a token bucket of `burst` requests refilled one per `interval`.
  bool rate_allows() {
    const http::RateLimit& limit = web->rate_limit;
    if (limit.interval.count() == 0) return true;
    const auto now = std::chrono::steady_clock::now();
    const double refill = std::chrono::duration<double>(now - rate_refilled).count() /
                          std::chrono::duration<double>(limit.interval).count();
    rate_tokens = std::min(static_cast<double>(limit.burst), rate_tokens + refill);
    rate_refilled = now;
    if (rate_tokens < 1) return false;
    rate_tokens -= 1;
    return true;
  }

  void apply_web_config(std::shared_ptr<const http::WebConfig> fresh) {
    // New users or hashes start with an empty verification cache; unchanged ones keep theirs.
    if (fresh->basic_auth_users != web->basic_auth_users) auth = http::BasicAuth(fresh->basic_auth_users);
    rate_tokens = fresh->rate_limit.burst;
    rate_refilled = std::chrono::steady_clock::now();
    web = std::move(fresh);
  }

  // SIGHUP: re-reads --web.config.file; certificates apply to connections accepted from now on, the
  // listener stays open. A file that cannot be used leaves the current config in force.
  bool reload_web_config() {
    if (config.web_config_file.empty()) return true;
    try {
      auto fresh = std::make_shared<const http::WebConfig>(http::load_web_config(config.web_config_file));
      if (fresh->tls.has_value() != server->serves_tls()) {
        throw http::WebConfigError("switching between HTTP and HTTPS (tls_server_config) needs a restart");
      }
      if (fresh->tls) server->set_tls_context(http::make_tls_context(*fresh->tls));
      apply_web_config(std::move(fresh));
      spdlog::info("web config {} reloaded", config.web_config_file);
      return true;
    } catch (const std::exception& e) {
      spdlog::error("web config reload failed, keeping the current one: {}", e.what());
      return false;
    }
  }

  void write_address_file() {
    if (config.address_file.empty()) return;
    const std::string temporary = config.address_file + ".tmp";
    {
      std::ofstream out(temporary, std::ios::trunc);
      out << server->bound_address() << "\n";
    }
    if (std::rename(temporary.c_str(), config.address_file.c_str()) != 0) {
      spdlog::warn("cannot write {}: {}", config.address_file, shm::errno_text(errno));
    }
  }
};

Daemon::Daemon(Config config) : state_(std::make_unique<State>(std::move(config))) {}
Daemon::~Daemon() = default;

int Daemon::run() {
  State& s = *state_;
  if (!s.config.web_config_file.empty()) {
    s.apply_web_config(
        std::make_shared<const http::WebConfig>(http::load_web_config(s.config.web_config_file)));
  }
  http::ServerOptions options;
  options.listen_addresses = s.config.listen_addresses;
  if (s.config.systemd_socket) options.listener_fds = http::systemd_listen_fds();
  if (s.web->tls) options.tls = http::make_tls_context(*s.web->tls);
  options.max_connections = s.config.max_connections;
  options.gzip_level = s.config.gzip_level;
  options.read_timeout = s.config.read_timeout;
  options.header_timeout = s.config.header_timeout;
  options.max_connections_per_peer = s.config.max_connections_per_peer;
  s.server = std::make_unique<http::Server>(s.io, options,
                                            [&s](const http::Request& r) { return s.handle_secured(r); });
  if (!s.config.state_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(s.config.state_dir, ec);
    if (ec) throw std::runtime_error("cannot create --state.dir " + s.config.state_dir + ": " + ec.message());
  }
  if (std::string error; !s.retired.check_directory(error)) throw std::runtime_error(error);
  if (std::string error; !s.retired.load(error)) spdlog::error("{}", error);
  s.scan_now();
  s.drain_rings(shm::monotonic_ns(), false);
  s.server->start();
  s.write_address_file();
  std::string addresses;
  for (const std::string& address : s.server->bound_addresses())
    addresses += (addresses.empty() ? "" : ", ") + address;
  spdlog::info("rankstatd {} (shm layout {}.{}) listening on {} ({}{}) at {}, reading {}", RANKSTAT_VERSION,
               shm::kLayoutMajor, shm::kLayoutMinor, addresses, s.server->serves_tls() ? "HTTPS" : "HTTP",
               s.auth.enabled() ? ", basic auth" : "", s.config.telemetry_path, s.config.shm_dir);
  s.start_poll();
  s.start_liveness();
  s.start_scan();
  s.start_inotify();
  s.start_signals();
  s.start_watchdog();
  http::notify_ready("serving " + s.server->bound_address());
  s.io.run();
  // A clean stop hands the next daemon the integrals up to the writers' last records, not only up to the
  // last scrape.
  const std::uint64_t stopped_ns = shm::monotonic_ns();
  s.drain_rings(stopped_ns, false);
  s.registry.refresh_cumulative();
  s.registry.settle_integrals(stopped_ns);
  s.save_integral_checkpoints();
  spdlog::info("rankstatd stopped");
  return 0;
}

}  // namespace rankstat
