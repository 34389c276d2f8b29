// The /metrics response, built on each scrape from the registry as of that moment (drained first), with
// what the last scrape left kept for the next: series storage and pre-rendered sample heads (FamilySet),
// the gzip of every family, re-deflated only when its text changed (ChunkedGzip), and the plain body.
//
// Threading contract: touched on the io thread only.
#pragma once

#include <array>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "config.hpp"
#include "engine_collect.hpp"
#include "http/chunked_gzip.hpp"
#include "http/http_server.hpp"
#include "retired_totals.hpp"
#include "segment_registry.hpp"
#include "segment_watch.hpp"
#include "self_metrics.hpp"
#include "text_exposition.hpp"

namespace rankstat {

class ScrapeCache {
 public:
  // `http_counters` gives the server's and the routes' counters for the self-metrics.
  ScrapeCache(const Config& config, SegmentRegistry& registry, RetiredTotals& retired, SelfMetrics& self,
              SegmentWatch& watch, std::function<HttpCounters()> http_counters);

  // The answer to a request for the telemetry path: gzip, plain or filtered (?name[]=, ?self_metrics=).
  http::Response respond(const http::Request& request);
  // Before any value is served (SegmentRegistry::save_checkpoints): a restarted daemon then continues
  // every integral, and keeps every generation that ended meanwhile, from at least what was served.
  void save_checkpoints();

 private:
  // Writes the exposition into `body`; `family_ends` receives where each family ends (the gzip chunks).
  // Names that are not classic are written as `escaping` asks (the request's Accept header).
  void render(std::string& body, std::vector<std::size_t>& family_ends, exposition::Escaping escaping);
  void note_drops();

  const Config& config_;
  SegmentRegistry& registry_;
  RetiredTotals& retired_;
  SelfMetrics& self_;
  SegmentWatch& watch_;
  std::function<HttpCounters()> http_counters_;
  FamilySet engine_;
  // One compressor per escaping scheme (made at its first request): each compares a body with the last
  // body of its own scheme, so scrapers that ask for different schemes do not re-deflate each other's.
  std::array<std::unique_ptr<http::ChunkedGzip>, exposition::kEscapingSchemes> gzip_;
  std::size_t last_body_bytes_ = 0;
  // The plain body of the last uncompressed scrape, rendered into again once no connection is still
  // sending it: at 32 ranks it is 1.7 MB, which a fresh allocation would page-fault in on every scrape.
  std::shared_ptr<std::string> plain_body_;
  std::vector<std::size_t> body_family_ends_;
  std::size_t engine_families_ = 0;  // families of the last exposition that are the engine's (scrape filter)
  // Each warning is logged once per daemon run: the self-metric gauges tell whether the cause persists.
  bool collision_logged_ = false;
  bool unexposable_logged_ = false;
  bool shadowed_logged_ = false;
  bool checkpoint_error_logged_ = false;
};

}  // namespace rankstat
