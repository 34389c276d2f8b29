#include "routes.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <boost/json/serialize.hpp>
#include <string>
#include <utility>

#include "api_json.hpp"
#include "query_string.hpp"

namespace rankstat {

namespace {

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

}  // namespace

Routes::Routes(const Config& config, SegmentRegistry& registry, SegmentWatch& watch, ScrapeCache& scrape)
    : config_(config), registry_(registry), watch_(watch), scrape_(scrape) {}

http::Response Routes::handle(const http::Request& request) {
  const std::string_view path = target_path(request.target);
  const bool open_probe =
      ((path == "/healthz" || path == "/readyz") && !config_.probes_require_auth) ||
      std::find(web_->basic_auth_excluded_paths.begin(), web_->basic_auth_excluded_paths.end(), path) !=
          web_->basic_auth_excluded_paths.end();
  http::Response response;
  if (!rate_allows()) {
    ++rate_limited_;
    response = text_response(429, "Too Many Requests\n");
  } else if (!auth_.enabled() || open_probe) {
    response = route(request, path);
  } else {
    const http::AuthOutcome outcome = auth_.check(request.authorization);
    if (outcome == http::AuthOutcome::kAccepted) {
      response = route(request, path);
    } else {
      // Neither the header nor the user name is logged: either may be a password typed in the wrong place.
      ++(outcome == http::AuthOutcome::kMissing ? auth_failures_missing_ : auth_failures_wrong_);
      spdlog::debug("HTTP request for {} refused: {} credentials", path.substr(0, 200),
                    outcome == http::AuthOutcome::kMissing ? "missing" : "wrong");
      response = text_response(401, "Unauthorized\n");
      response.extra_headers.emplace_back("WWW-Authenticate", std::string(http::BasicAuth::kChallenge));
    }
  }
  for (const auto& header : web_->headers) response.extra_headers.push_back(header);
  return response;
}

http::Response Routes::route(const http::Request& request, std::string_view path) {
  if (path == config_.telemetry_path) return scrape_.respond(request);
  if (path == "/healthz") return text_response(200, "ok\n");
  if (path == "/readyz") {
    return registry_.scanned_once() && !stopping_ ? text_response(200, "ready\n")
                                                  : text_response(503, "not ready\n");
  }
  if (path == "/") {
    http::Response r;
    r.content_type = "text/html; charset=utf-8";
    r.body = landing_page(config_.telemetry_path);
    return r;
  }
  if (path == "/api/v1/ranks") {
    const std::uint64_t now_ns = shm::monotonic_ns();
    watch_.drain_rings(now_ns, false);
    const bool details = query_flag(request.target, "details");
    if (details) registry_.refresh_cumulative();
    return json_response(200, ranks_json(registry_, now_ns, details));
  }
  constexpr std::string_view kRankPrefix = "/api/v1/ranks/";
  if (path.starts_with(kRankPrefix)) {
    const std::string id(path.substr(kRankPrefix.size()));
    const std::uint64_t now_ns = shm::monotonic_ns();
    watch_.drain_rings(now_ns, false);
    registry_.refresh_cumulative();
    if (const RankSegment* s = registry_.find_current(id)) {
      return json_response(200, boost::json::serialize(rank_detail_json(*s, now_ns)));
    }
    // Serialized, not pasted: the id comes from the request and may hold quotes or backslashes.
    return json_response(404, boost::json::serialize(boost::json::object{
                                  {"error", "no such rank"}, {"id", shm::replace_invalid_utf8(id)}}));
  }
  return text_response(404, "not found: try " + config_.telemetry_path + "\n");
}

// exporter-toolkit's rate_limit: a token bucket of `burst` requests refilled one per `interval`.
bool Routes::rate_allows() {
  const http::RateLimit& limit = web_->rate_limit;
  if (limit.interval.count() == 0) return true;
  const auto now = std::chrono::steady_clock::now();
  const double refill = std::chrono::duration<double>(now - rate_refilled_).count() /
                        std::chrono::duration<double>(limit.interval).count();
  rate_tokens_ = std::min(static_cast<double>(limit.burst), rate_tokens_ + refill);
  rate_refilled_ = now;
  if (rate_tokens_ < 1) return false;
  rate_tokens_ -= 1;
  return true;
}

void Routes::apply_web_config(std::shared_ptr<const http::WebConfig> fresh) {
  // New users or hashes start with an empty verification cache; unchanged ones keep theirs.
  if (fresh->basic_auth_users != web_->basic_auth_users) auth_ = http::BasicAuth(fresh->basic_auth_users);
  rate_tokens_ = fresh->rate_limit.burst;
  rate_refilled_ = std::chrono::steady_clock::now();
  web_ = std::move(fresh);
}

void Routes::add_counters(HttpCounters& counters) const {
  counters.auth_failures_missing_total = auth_failures_missing_;
  counters.auth_failures_wrong_total = auth_failures_wrong_;
  counters.rate_limited_total = rate_limited_;
}

}  // namespace rankstat
