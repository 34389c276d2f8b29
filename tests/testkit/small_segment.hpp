// ReporterOptions for a small segment in a test's directory: tests that open many writers, or fill a
// cumulative block on purpose, keep each segment a few KiB. Header-only, so that the testkit itself does
// not depend on the client: include it only in tests that link the client.
#pragma once

#include <string>
#include <utility>

#include "rankstat/reporter.hpp"
#include "testkit.hpp"

namespace rankstat::testkit {

inline ReporterOptions small_segment_options(const TempDir& dir, std::string instance, int dp_rank) {
  ReporterOptions options;
  options.shm_dir = dir.path();
  options.identity.instance = std::move(instance);
  options.identity.dp_rank = dp_rank;
  options.geometry.ring_bytes = 16 * 1024;
  options.geometry.series_capacity = 16;
  options.geometry.bounds_capacity = 64;
  options.geometry.values_capacity = 256;
  return options;
}

}  // namespace rankstat::testkit
