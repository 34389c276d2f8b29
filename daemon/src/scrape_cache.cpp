#include "scrape_cache.hpp"

#include <spdlog/spdlog.h>

#include <chrono>
#include <utility>

#include "http/gzip.hpp"
#include "process_metrics.hpp"
#include "scrape_filter.hpp"

namespace rankstat {

namespace {

constexpr std::string_view kTextContentType = "text/plain; version=0.0.4; charset=utf-8";

}  // namespace

ScrapeCache::ScrapeCache(const Config& config, SegmentRegistry& registry, RetiredTotals& retired,
                         SelfMetrics& self, SegmentWatch& watch, std::function<HttpCounters()> http_counters)
    : config_(config),
      registry_(registry),
      retired_(retired),
      self_(self),
      watch_(watch),
      http_counters_(std::move(http_counters)) {
  Labels constant;
  for (const auto& [name, value] : config_.constant_labels) constant.push_back({name, value});
  engine_.set_constant_labels(std::move(constant));
}

http::Response ScrapeCache::respond(const http::Request& request) {
  http::Response r;
  // The escaping scheme the scraper asks for (docs/http-api.md): named in the Content-Type unless it is
  // the default, so that a scraper that asked for none gets the header it always got.
  const exposition::Escaping escaping = exposition::negotiate_escaping(request.accept);
  r.content_type = std::string(kTextContentType);
  r.vary =
      "Accept";  // the escaping scheme is the Accept header's choice (and the encoding Accept-Encoding's)
  if (escaping != exposition::Escaping::kUnderscores)
    r.content_type.append("; escaping=").append(exposition::escaping_name(escaping));
  if (const ScrapeFilter filter = parse_scrape_filter(request.target); filter.active()) {
    std::string full;
    std::vector<std::size_t> family_ends;
    render(full, family_ends, escaping);
    r.body = apply_scrape_filter(full, family_ends, engine_families_, filter, escaping);
    r.compressible = true;
    return r;
  }
  std::vector<std::size_t>& family_ends = body_family_ends_;
  family_ends.clear();
  if (http::accepts_gzip(request.accept_encoding)) {
    // Rendered into the compressor's own buffer: it compares each family with the previous body and
    // deflates only those that changed.
    std::unique_ptr<http::ChunkedGzip>& gzip = gzip_[static_cast<std::size_t>(escaping)];
    if (gzip == nullptr) gzip = std::make_unique<http::ChunkedGzip>(1);
    std::string& body = gzip->next_body();
    render(body, family_ends, escaping);
    try {
      gzip->set_level(config_.gzip_level);
      r.precompressed_gzip = gzip->compress(family_ends);
      return r;
    } catch (const std::exception& e) {
      spdlog::warn("gzip of /metrics failed, sending it uncompressed: {}", e.what());
      r.body = body;
      return r;
    }
  }
  if (plain_body_ == nullptr || plain_body_.use_count() != 1) plain_body_ = std::make_shared<std::string>();
  plain_body_->clear();
  render(*plain_body_, family_ends, escaping);
  r.shared_body = plain_body_;
  // The client refused gzip, so none is made; marked negotiable so that Vary names Accept-Encoding too (a
  // cache must not hand this body to a client that accepts gzip).
  r.compressible = true;
  return r;
}

void ScrapeCache::save_checkpoints() {
  if (!retired_.persistent()) return;
  std::string error;
  if (!registry_.save_checkpoints(error) && !checkpoint_error_logged_) {
    checkpoint_error_logged_ = true;  // the next scrape tries again
    spdlog::error(
        "checkpoint not saved (a daemon restart would restart the integrals, and lose a generation that "
        "ends while no daemon runs): {}",
        error);
  }
}

void ScrapeCache::render(std::string& body, std::vector<std::size_t>& family_ends,
                         exposition::Escaping escaping) {
  const auto started = std::chrono::steady_clock::now();
  const std::uint64_t now_ns = shm::monotonic_ns();
  watch_.drain_rings(now_ns, false);  // freshest data for this scrape
  registry_.refresh_cumulative();
  registry_.settle_integrals(now_ns);
  CollectOptions options;
  options.instance_label = config_.instance_label;
  options.now_ns = now_ns;
  options.dead_grace_ns = static_cast<std::uint64_t>(config_.dead_grace.count()) * 1'000'000ull;
  options.integrals = &registry_.integrals();
  collect_engine_metrics(registry_.generations(), options, engine_);
  save_checkpoints();
  retired_.contribute(engine_, registry_.retired_families_left_out());
  note_drops();
  body.reserve(last_body_bytes_ + last_body_bytes_ / 8);
  // The engine families in prometheus_client's spelling (what engine.finish() gives through
  // exposition::serialize with Dialect::kPrometheusClient), then the self-metrics in prometheus-cpp's.
  engine_.render(body, &family_ends, escaping);
  engine_families_ = family_ends.size();
  for (const prometheus::MetricFamily& family : self_.collect(registry_, http_counters_(), now_ns)) {
    exposition::append_family(body, family, exposition::Dialect::kPrometheusCpp, escaping);
    family_ends.push_back(body.size());
  }
  if (const auto stats = read_process_stats()) {
    for (const prometheus::MetricFamily& family : process_families(*stats)) {
      exposition::append_family(body, family, exposition::Dialect::kPrometheusCpp, escaping);
      family_ends.push_back(body.size());
    }
  }
  last_body_bytes_ = body.size();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  self_.observe_scrape(seconds, body.size());
}

void ScrapeCache::note_drops() {
  self_.set_scrape_drops(engine_.conflicts(), engine_.collisions());
  self_.set_unexposable_drops(engine_.unexposable());
  if (engine_.unexposable() != 0 && !unexposable_logged_) {
    unexposable_logged_ = true;
    spdlog::warn(
        "{} samples dropped: their labels cannot be written correctly (invalid UTF-8, a reserved or "
        "repeated label name, e.g. in a segment's model_name or extra labels); the other samples are "
        "served (rankstat_scrape_unexposable_samples)",
        engine_.unexposable());
  }
  self_.set_shadowed_constant_labels(engine_.shadowed_constant_labels());
  if (engine_.shadowed_constant_labels() != 0 && !shadowed_logged_) {
    shadowed_logged_ = true;
    spdlog::warn(
        "{} engine series carry a label named like a constant label (--label.NAME, RANKSTAT_LABEL_NAME): "
        "they keep the engine's value and go without the constant one; rename the constant label "
        "(rankstat_scrape_shadowed_constant_labels)",
        engine_.shadowed_constant_labels());
  }
  if (engine_.collisions() != 0 && !collision_logged_) {
    collision_logged_ = true;
    spdlog::warn(
        "{} samples dropped: two engine instances export series with identical labels (the second "
        "instance's are left out); give each engine its own labels or start rankstatd with "
        "--label.instance=instance_id (rankstat_scrape_instance_collisions)",
        engine_.collisions());
  }
}

}  // namespace rankstat
