#include "daemon.hpp"

#include <spdlog/spdlog.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>

#include "http/http_server.hpp"
#include "http/systemd_notify.hpp"
#include "http/web_config.hpp"
#include "rankstat/shmproto/process.hpp"
#include "rankstat/shmproto/schema.hpp"
#include "retired_totals.hpp"
#include "routes.hpp"
#include "scrape_cache.hpp"
#include "segment_registry.hpp"
#include "segment_watch.hpp"
#include "self_metrics.hpp"
#include "service_control.hpp"

namespace rankstat {
namespace {

namespace asio = boost::asio;

RegistryOptions registry_options(const Config& c) {
  RegistryOptions o;
  o.directory = c.shm_dir;
  o.instances = c.instances;
  o.instance_label = c.instance_label;
  o.dead_grace = c.dead_grace;
  o.trust.allowed_uids = c.allowed_uids;
  o.trust.any_owner = c.any_owner;
  o.trust.allow_world_writable = c.allow_world_writable;
  o.trust.instance_owners = c.instance_owners;
  o.max_series_per_segment = c.max_series_per_segment;
  o.integrals.families.insert(c.integrate_families.begin(), c.integrate_families.end());
  o.integrals.peak_window_ns = static_cast<std::uint64_t>(c.peak_window.count()) * 1'000'000ull;
  return o;
}

http::ServerOptions server_options(const Config& c, const http::WebConfig& web) {
  http::ServerOptions options;
  options.listen_addresses = c.listen_addresses;
  if (c.systemd_socket) options.listener_fds = http::systemd_listen_fds();
  if (web.tls) options.tls = http::make_tls_context(*web.tls);
  options.max_connections = c.max_connections;
  options.gzip_level = c.gzip_level;
  options.read_timeout = c.read_timeout;
  options.header_timeout = c.header_timeout;
  options.max_connections_per_peer = c.max_connections_per_peer;
  return options;
}

HttpCounters server_counters(const http::Server& server) {
  return server.counters();
}

void write_address_file(const std::string& path, const std::string& address) {
  if (path.empty()) return;
  const std::string temporary = path + ".tmp";
  {
    std::ofstream out(temporary, std::ios::trunc);
    out << address << "\n";
  }
  if (std::rename(temporary.c_str(), path.c_str()) != 0) {
    spdlog::warn("cannot write {}: {}", path, shm::errno_text(errno));
  }
}

}  // namespace

// The components and how they are connected; each one's job is in its own header. Declaration order is
// construction order: each component is built from the ones above it.
struct Daemon::State {
  Config config;  // replaced in place on SIGHUP: the components hold a reference to it
  asio::io_context io;
  RetiredTotals retired;
  SegmentRegistry registry;
  SelfMetrics self;
  SegmentWatch watch{io, config, registry, self};
  ScrapeCache scrape{config, registry, retired, self, watch, [this] { return http_counters(); }};
  Routes routes{config, registry, watch, scrape};
  ServiceControl service{io, {[this] { shutdown(); }, [this] { reload(); }}};
  std::unique_ptr<http::Server> server;
  asio::steady_timer shutdown_deadline{io};
  asio::steady_timer idle_check{io};
  bool stopping = false;

  explicit State(Config c)
      : config(std::move(c)), retired(config.state_dir), registry(registry_options(config), retired) {}

  HttpCounters http_counters() const {
    HttpCounters c = server ? server_counters(*server) : HttpCounters{};
    routes.add_counters(c);
    return c;
  }

  void shutdown() {
    if (stopping) return;
    stopping = true;
    routes.set_stopping();
    service.stop();
    watch.stop();
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

  void reload() {
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
      watch.set_poll_bounds(config.poll_interval, config.poll_interval_max);
      self.note_reload(web_reloaded);
      spdlog::info("configuration reloaded");
    } else {
      self.note_reload(false);
      spdlog::error("configuration reload failed, keeping the current one: {}", error);
    }
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
      routes.apply_web_config(std::move(fresh));
      spdlog::info("web config {} reloaded", config.web_config_file);
      return true;
    } catch (const std::exception& e) {
      spdlog::error("web config reload failed, keeping the current one: {}", e.what());
      return false;
    }
  }
};

Daemon::Daemon(Config config) : state_(std::make_unique<State>(std::move(config))) {}
Daemon::~Daemon() = default;

int Daemon::run() {
  State& s = *state_;
  if (!s.config.web_config_file.empty()) {
    s.routes.apply_web_config(
        std::make_shared<const http::WebConfig>(http::load_web_config(s.config.web_config_file)));
  }
  s.server = std::make_unique<http::Server>(s.io, server_options(s.config, s.routes.web_config()),
                                            [&s](const http::Request& r) { return s.routes.handle(r); });
  if (!s.config.state_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(s.config.state_dir, ec);
    if (ec) throw std::runtime_error("cannot create --state.dir " + s.config.state_dir + ": " + ec.message());
  }
  if (std::string error; !s.retired.check_directory(error)) throw std::runtime_error(error);
  if (std::string error; !s.retired.load(error)) spdlog::error("{}", error);
  s.watch.scan_now();
  s.watch.drain_rings(shm::monotonic_ns(), false);
  s.server->start();
  write_address_file(s.config.address_file, s.server->bound_address());
  std::string addresses;
  for (const std::string& address : s.server->bound_addresses())
    addresses += (addresses.empty() ? "" : ", ") + address;
  spdlog::info("rankstatd {} (shm layout {}.{}) listening on {} ({}{}) at {}, reading {}", RANKSTAT_VERSION,
               shm::kLayoutMajor, shm::kLayoutMinor, addresses, s.server->serves_tls() ? "HTTPS" : "HTTP",
               s.routes.auth_enabled() ? ", basic auth" : "", s.config.telemetry_path, s.config.shm_dir);
  s.watch.start();
  s.service.start("serving " + s.server->bound_address());
  s.io.run();
  // A clean stop hands the next daemon the integrals and totals up to the writers' last records, not only
  // up to the last scrape.
  const std::uint64_t stopped_ns = shm::monotonic_ns();
  s.watch.drain_rings(stopped_ns, false);
  s.registry.refresh_cumulative();
  s.registry.settle_integrals(stopped_ns);
  s.scrape.save_checkpoints();
  spdlog::info("rankstatd stopped");
  return 0;
}

}  // namespace rankstat
