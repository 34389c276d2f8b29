// The HTTP endpoints behind the server: the web config's rate limit and basic auth, then /metrics (the
// scrape cache), the JSON API, the probes and the landing page.
//
// Threading contract: touched on the io thread only (the server calls handle() there).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string_view>

#include "config.hpp"
#include "http/basic_auth.hpp"
#include "http/http_server.hpp"
#include "http/web_config.hpp"
#include "scrape_cache.hpp"
#include "segment_registry.hpp"
#include "segment_watch.hpp"
#include "self_metrics.hpp"

namespace rankstat {

class Routes {
 public:
  Routes(const Config& config, SegmentRegistry& registry, SegmentWatch& watch, ScrapeCache& scrape);

  // Every request enters here: the rate limit, then basic auth (the probes may stay open), then the
  // endpoints; the configured headers go on every answer, 401 and 429 included.
  http::Response handle(const http::Request& request);

  // --web.config.file as (re)loaded; until then plain HTTP without auth or rate limit.
  void apply_web_config(std::shared_ptr<const http::WebConfig> fresh);
  [[nodiscard]] const http::WebConfig& web_config() const { return *web_; }
  [[nodiscard]] bool auth_enabled() const { return auth_.enabled(); }
  // From now on /readyz answers 503, so a load balancer stops sending scrapes during shutdown.
  void set_stopping() { stopping_ = true; }
  void add_counters(HttpCounters& counters) const;

 private:
  http::Response route(const http::Request& request, std::string_view path);
  bool rate_allows();

  const Config& config_;
  SegmentRegistry& registry_;
  SegmentWatch& watch_;
  ScrapeCache& scrape_;
  std::shared_ptr<const http::WebConfig> web_ = std::make_shared<const http::WebConfig>();
  http::BasicAuth auth_;
  double rate_tokens_ = 0;
  std::chrono::steady_clock::time_point rate_refilled_ = std::chrono::steady_clock::now();
  std::uint64_t auth_failures_missing_ = 0;
  std::uint64_t auth_failures_wrong_ = 0;
  std::uint64_t rate_limited_ = 0;
  bool stopping_ = false;
};

}  // namespace rankstat
