// The cumulative block: registration, updates as a reader sees them, histogram bucket placement, and
// a reader that refuses descriptors it cannot trust.
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "rankstat/shmproto/cumulative.hpp"
#include "rankstat/shmproto/layout.hpp"

namespace {

namespace shm = rankstat::shm;

// A cumulative block in heap memory (8-byte aligned, as in a mapping), with its capacities set the way
// create_segment sets them.
class CumulativeBlock {
 public:
  explicit CumulativeBlock(shm::CumulativeGeometry geometry)
      : geometry_(geometry), words_(geometry.total_bytes() / 8, 0) {
    auto* header = reinterpret_cast<shm::CumulativeHeader*>(words_.data());
    header->series_capacity = geometry.series_capacity;
    header->bounds_capacity = geometry.bounds_capacity;
    header->values_capacity = geometry.values_capacity;
    header->text_capacity = geometry.text_bytes();
  }

  shm::CumulativeRegion region() {
    return shm::cumulative_region(reinterpret_cast<std::uint8_t*>(words_.data()), geometry_);
  }
  shm::CumulativeWriter writer() { return shm::CumulativeWriter(region()); }
  shm::CumulativeReader reader() { return shm::CumulativeReader(region(), geometry_); }
  shm::CumulativeHeader& header() { return *region().header; }
  shm::SeriesDescriptor& descriptor(std::uint32_t index) { return region().descriptors[index]; }

 private:
  shm::CumulativeGeometry geometry_;
  std::vector<std::uint64_t> words_;
};

constexpr shm::CumulativeGeometry kRoomy{16, 256, 1024};

std::uint32_t failures(CumulativeBlock& block) {
  return shm::shared(block.header().registration_failures).load(std::memory_order_relaxed);
}

}  // namespace

TEST_CASE("Registered counters, gauges and histograms are visible to a reader with their updates",
          "[cumulative]") {
  CumulativeBlock block(kRoomy);
  shm::CumulativeWriter writer = block.writer();
  const shm::CumulativeReader reader = block.reader();
  CHECK(reader.published_series() == 0);

  std::uint32_t counter = 99;
  std::uint32_t gauge = 99;
  std::uint32_t histogram = 99;
  const double bounds[] = {0.1, 0.5, 1.0};
  REQUIRE(writer.register_series(shm::SeriesKind::kCounter, shm::GaugeMode::kAll,
                                 "sglang:prompt_tokens_total", {{"model_name", "m"}}, {},
                                 counter) == shm::RegisterStatus::kOk);
  REQUIRE(writer.register_series(shm::SeriesKind::kGauge, shm::GaugeMode::kLiveMostRecent,
                                 "sglang:num_running", {}, {}, gauge) == shm::RegisterStatus::kOk);
  REQUIRE(writer.register_series(shm::SeriesKind::kHistogram, shm::GaugeMode::kAll, "sglang:ttft_seconds",
                                 {{"model_name", "m"}, {"priority", "1"}}, bounds,
                                 histogram) == shm::RegisterStatus::kOk);
  CHECK(counter == 0);
  CHECK(gauge == 1);
  CHECK(histogram == 2);
  REQUIRE(reader.published_series() == 3);

  const auto counter_info = reader.read_descriptor(counter);
  const auto gauge_info = reader.read_descriptor(gauge);
  const auto histogram_info = reader.read_descriptor(histogram);
  REQUIRE(counter_info);
  REQUIRE(gauge_info);
  REQUIRE(histogram_info);
  CHECK(counter_info->kind == shm::SeriesKind::kCounter);
  CHECK(counter_info->family == "sglang:prompt_tokens_total");
  CHECK(counter_info->labels == shm::LabelPairs{{"model_name", "m"}});
  CHECK(gauge_info->kind == shm::SeriesKind::kGauge);
  CHECK(gauge_info->gauge_mode == shm::GaugeMode::kLiveMostRecent);
  CHECK(gauge_info->labels.empty());
  CHECK(histogram_info->kind == shm::SeriesKind::kHistogram);
  CHECK(histogram_info->bounds == std::vector<double>{0.1, 0.5, 1.0});
  CHECK(histogram_info->labels == shm::LabelPairs{{"model_name", "m"}, {"priority", "1"}});

  shm::SeriesValue value;
  reader.read_value(*gauge_info, value);
  CHECK(value.set_ns == 0);  // never set

  writer.counter_add(counter, 5);
  writer.counter_add(counter, 2.5);
  writer.gauge_set(gauge, -3.25, 123456);
  writer.histogram_observe(histogram, 0.3, 1, 0.3);
  writer.histogram_observe(histogram, 0.3, 1, 0.3);

  reader.read_value(*counter_info, value);
  CHECK(value.value == 7.5);
  reader.read_value(*gauge_info, value);
  CHECK(value.value == -3.25);
  CHECK(value.set_ns == 123456);
  CHECK(value.consistent);
  reader.read_value(*histogram_info, value);
  CHECK(value.counts == std::vector<std::uint64_t>{0, 2, 0, 0});
  CHECK(value.sum == Approx(0.6));
  CHECK(value.consistent);

  SECTION("a second writer over the same block resumes where the first stopped") {
    shm::CumulativeWriter resumed = block.writer();
    CHECK(resumed.series_count() == 3);
    std::uint32_t next = 0;
    REQUIRE(resumed.register_series(shm::SeriesKind::kCounter, shm::GaugeMode::kAll, "other_total", {}, {},
                                    next) == shm::RegisterStatus::kOk);
    CHECK(next == 3);
    const auto info = reader.read_descriptor(next);
    REQUIRE(info);
    CHECK(info->values_offset > histogram_info->values_offset);
  }
}

TEST_CASE("Histogram observations land in the first bucket whose upper bound is at least the value",
          "[cumulative]") {
  CumulativeBlock block(kRoomy);
  shm::CumulativeWriter writer = block.writer();
  const shm::CumulativeReader reader = block.reader();
  const double bounds[] = {1, 2, 5};
  std::uint32_t id = 0;
  REQUIRE(writer.register_series(shm::SeriesKind::kHistogram, shm::GaugeMode::kAll, "latency_seconds", {},
                                 bounds, id) == shm::RegisterStatus::kOk);
  const auto info = reader.read_descriptor(id);
  REQUIRE(info);

  writer.histogram_observe(id, -4, 1, -4);  // below the first bound
  writer.histogram_observe(id, 1, 1, 1);    // equal to a bound: that bucket (le)
  writer.histogram_observe(id, 1.0001, 1, 1.0001);
  writer.histogram_observe(id, 2, 1, 2);
  writer.histogram_observe(id, 5, 1, 5);      // equal to the last bound
  writer.histogram_observe(id, 5.5, 1, 5.5);  // above the last bound: +Inf
  writer.histogram_observe(id, std::numeric_limits<double>::infinity(), 1, 0);
  writer.histogram_observe(id, 0.5, 40, 20);  // bulk observe: 40 samples of 0.5

  shm::SeriesValue value;
  reader.read_value(*info, value);
  CHECK(value.counts == std::vector<std::uint64_t>{42, 2, 1, 2});
  CHECK(value.sum == Approx(-4 + 1 + 1.0001 + 2 + 5 + 5.5 + 20));

  SECTION("a histogram without finite bounds has only the +Inf bucket") {
    std::uint32_t bare = 0;
    REQUIRE(writer.register_series(shm::SeriesKind::kHistogram, shm::GaugeMode::kAll, "bare", {}, {}, bare) ==
            shm::RegisterStatus::kOk);
    writer.histogram_observe(bare, 123, 3, 369);
    const auto bare_info = reader.read_descriptor(bare);
    REQUIRE(bare_info);
    reader.read_value(*bare_info, value);
    CHECK(value.counts == std::vector<std::uint64_t>{3});
    CHECK(value.sum == 369);
  }
  SECTION("NaN lands in no bucket, as in prometheus_client: the count stays, the sum takes it") {
    writer.histogram_observe(id, std::numeric_limits<double>::quiet_NaN(), 1,
                             std::numeric_limits<double>::quiet_NaN());
    reader.read_value(*info, value);
    CHECK(value.counts == std::vector<std::uint64_t>{42, 2, 1, 2});
    CHECK(std::isnan(value.sum));
  }
  SECTION("a summary counts a NaN observation") {
    std::uint32_t summary = 0;
    REQUIRE(writer.register_series(shm::SeriesKind::kSummary, shm::GaugeMode::kAll, "size_bytes", {}, {},
                                   summary) == shm::RegisterStatus::kOk);
    writer.histogram_observe(summary, 3, 1, 3);
    writer.histogram_observe(summary, std::numeric_limits<double>::quiet_NaN(), 1,
                             std::numeric_limits<double>::quiet_NaN());
    const auto summary_info = reader.read_descriptor(summary);
    REQUIRE(summary_info);
    reader.read_value(*summary_info, value);
    CHECK(value.counts == std::vector<std::uint64_t>{2});
    CHECK(std::isnan(value.sum));
  }
  SECTION("histograms with equal bounds share one copy of them") {
    const std::uint32_t used = block.header().bounds_used;
    std::uint32_t twin = 0;
    REQUIRE(writer.register_series(shm::SeriesKind::kHistogram, shm::GaugeMode::kAll, "latency_seconds",
                                   {{"stage", "b"}}, bounds, twin) == shm::RegisterStatus::kOk);
    CHECK(block.header().bounds_used == used);
    CHECK(block.descriptor(twin).bounds_offset == block.descriptor(id).bounds_offset);
  }
}

TEST_CASE("Invalid names, labels, bounds and modes are rejected and counted as registration failures",
          "[cumulative]") {
  CumulativeBlock block(kRoomy);
  shm::CumulativeWriter writer = block.writer();
  std::uint32_t id = 12345;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  auto counter = [&](std::string family, shm::LabelPairs labels = {}) {
    return writer.register_series(shm::SeriesKind::kCounter, shm::GaugeMode::kAll, family, labels, {}, id);
  };
  auto histogram = [&](std::vector<double> bounds) {
    return writer.register_series(shm::SeriesKind::kHistogram, shm::GaugeMode::kAll, "h", {}, bounds, id);
  };

  // Names are any non-empty UTF-8 text without NUL (prometheus_client 0.22+); label names not `__…`.
  CHECK(counter("") == shm::RegisterStatus::kInvalid);
  CHECK(counter("a\xFF") == shm::RegisterStatus::kInvalid);
  CHECK(counter("\xED\xA0\x80") == shm::RegisterStatus::kInvalid);  // a surrogate
  CHECK(counter(std::string("a\0b", 3)) == shm::RegisterStatus::kInvalid);
  CHECK(counter("ok", {{"__reserved", "v"}}) == shm::RegisterStatus::kInvalid);
  CHECK(counter("ok", {{"\xC0\x80", "v"}}) == shm::RegisterStatus::kInvalid);  // overlong NUL
  CHECK(counter("ok", {{std::string("a\0", 2), "v"}}) == shm::RegisterStatus::kInvalid);
  CHECK(counter("ok", {{"", "v"}}) == shm::RegisterStatus::kInvalid);
  CHECK(counter("ok", {{"name", "\xC3"}}) == shm::RegisterStatus::kInvalid);
  CHECK(counter("ok", {{"name", "\xED\xA0\x80"}}) == shm::RegisterStatus::kInvalid);  // a surrogate
  CHECK(counter("ok", {{"a", "1"}, {"a", "2"}}) == shm::RegisterStatus::kInvalid);
  CHECK(histogram({1, 1}) == shm::RegisterStatus::kInvalid);
  CHECK(histogram({2, 1}) == shm::RegisterStatus::kInvalid);
  CHECK(histogram({1, nan}) == shm::RegisterStatus::kInvalid);
  CHECK(histogram({1, inf}) == shm::RegisterStatus::kInvalid);
  CHECK(histogram(std::vector<double>(shm::kMaxHistogramBuckets + 1u, 0)) == shm::RegisterStatus::kInvalid);
  const double one_bound[] = {1.0};
  CHECK(writer.register_series(shm::SeriesKind::kCounter, shm::GaugeMode::kAll, "c", {}, one_bound, id) ==
        shm::RegisterStatus::kInvalid);
  CHECK(writer.register_series(shm::SeriesKind::kGauge, static_cast<shm::GaugeMode>(shm::kGaugeModeCount),
                               "g", {}, {}, id) == shm::RegisterStatus::kInvalid);

  CHECK(failures(block) == 18);
  CHECK(id == 12345);  // untouched on failure
  CHECK(writer.series_count() == 0);
  CHECK(block.reader().published_series() == 0);

  SECTION("valid names at the edges of the rules are accepted") {
    CHECK(counter("sglang:x_1") == shm::RegisterStatus::kOk);
    CHECK(counter(":colon_first") == shm::RegisterStatus::kOk);
    CHECK(counter(std::string(500, 'a')) == shm::RegisterStatus::kOk);  // no length limit but the area's
    CHECK(counter("ok", {{"_x", ""}, {"y9", "any value \xe2\x9c\x93"}}) == shm::RegisterStatus::kOk);
    CHECK(counter("ok", {{std::string(300, 'l'), "v"}}) == shm::RegisterStatus::kOk);
    // Beyond the classic rules: what Prometheus 3 and prometheus_client 0.22+ accept.
    CHECK(counter("1abc") == shm::RegisterStatus::kOk);
    CHECK(counter("my.metric") == shm::RegisterStatus::kOk);
    CHECK(counter("a b-c/\"d\"\n") == shm::RegisterStatus::kOk);
    CHECK(counter("gr\xC3\xB6\xC3\x9F"
                  "e",
                  {{"http.method", "v"}, {"1st", "v"}, {"a:b", "v"}}) == shm::RegisterStatus::kOk);
    CHECK(histogram(std::vector<double>{-1, 0, 1e300}) == shm::RegisterStatus::kOk);
    CHECK(failures(block) == 18);
  }
}

TEST_CASE(
    "A declared series carries its help text, summaries count and sum, and the internals update one part",
    "[cumulative]") {
  CumulativeBlock block(kRoomy);
  shm::CumulativeWriter writer = block.writer();
  const double bounds[] = {0.5, 1.0};
  std::uint32_t h1 = 0;
  std::uint32_t h2 = 0;
  std::uint32_t summary = 0;
  std::uint32_t gauge = 0;
  const std::string help = "Latency \\ in seconds.\nSecond line, caf\xC3\xA9.";
  REQUIRE(writer.register_series(shm::SeriesKind::kHistogram, shm::GaugeMode::kAll, "lat_seconds",
                                 {{"model_name", "m"}}, bounds, h1, shm::kSeriesWithoutIdentityLabels,
                                 help) == shm::RegisterStatus::kOk);
  REQUIRE(writer.register_series(shm::SeriesKind::kHistogram, shm::GaugeMode::kAll, "lat_seconds",
                                 {{"model_name", "n"}}, bounds, h2, shm::kSeriesWithoutIdentityLabels,
                                 help) == shm::RegisterStatus::kOk);
  REQUIRE(writer.register_series(shm::SeriesKind::kSummary, shm::GaugeMode::kAll, "balance", {}, {}, summary,
                                 0, "Balance.") == shm::RegisterStatus::kOk);
  REQUIRE(writer.register_series(shm::SeriesKind::kGauge, shm::GaugeMode::kLiveSum, "g", {}, {}, gauge) ==
          shm::RegisterStatus::kOk);
  // The help text is stored once for the family.
  CHECK(block.descriptor(h1).help_offset == block.descriptor(h2).help_offset);
  CHECK(block.descriptor(h1).family_offset == block.descriptor(h2).family_offset);
  // Texts: each family name once, the help once, the label lists, "balance" and "g" with no labels.
  CHECK(shm::shared(block.header().text_used).load() ==
        std::string("lat_seconds").size() + help.size() +
            2 * shm::encoded_series_label_bytes({{"model_name", "m"}}) + std::string("balance").size() +
            std::string("Balance.").size() + std::string("g").size());

  writer.histogram_observe(h1, 0.7, 1, 0.7);
  writer.histogram_bucket_add(h1, 0, 3);  // _buckets[0].inc(3)
  writer.histogram_add_sum(h1, 1.5);      // _sum.inc(1.5)
  writer.histogram_observe(summary, 2.5, 1, 2.5);
  writer.histogram_observe(summary, 0.5, 1, 0.5);
  CHECK(writer.gauge_add(gauge, 2.0, 100) == 2.0);
  CHECK(writer.gauge_add(gauge, -0.5, 200) == 1.5);
  CHECK(writer.value(h1) == Approx(2.2));
  CHECK(writer.bucket_count_value(h1, 0) == 3);
  CHECK(writer.bucket_count_value(h1, 1) == 1);

  const shm::CumulativeReader reader = block.reader();
  const auto info = reader.read_descriptor(h1);
  REQUIRE(info);
  CHECK(info->help == help);
  CHECK((info->flags & shm::kSeriesWithoutIdentityLabels) != 0);
  shm::SeriesValue value;
  reader.read_value(*info, value);
  CHECK(value.counts == std::vector<std::uint64_t>{3, 1, 0});
  CHECK(value.sum == Approx(2.2));
  const auto s = reader.read_descriptor(summary);
  REQUIRE(s);
  CHECK(s->kind == shm::SeriesKind::kSummary);
  CHECK(s->help == "Balance.");
  reader.read_value(*s, value);
  CHECK(value.counts == std::vector<std::uint64_t>{2});
  CHECK(value.sum == 3.0);
  const auto g = reader.read_descriptor(gauge);
  REQUIRE(g);
  CHECK(g->help.empty());
  reader.read_value(*g, value);
  CHECK(value.value == 1.5);
}

TEST_CASE("Labels the exposition reserves, and help that is not UTF-8, are refused at registration",
          "[cumulative]") {
  CumulativeBlock block(kRoomy);
  shm::CumulativeWriter writer = block.writer();
  std::uint32_t id = 0;
  CHECK(writer.register_series(shm::SeriesKind::kHistogram, shm::GaugeMode::kAll, "h", {{"le", "1"}}, {},
                               id) == shm::RegisterStatus::kInvalid);
  CHECK(writer.register_series(shm::SeriesKind::kSummary, shm::GaugeMode::kAll, "s", {{"quantile", "0.5"}},
                               {}, id) == shm::RegisterStatus::kInvalid);
  CHECK(writer.register_series(shm::SeriesKind::kCounter, shm::GaugeMode::kAll, "c", {}, {}, id, 0,
                               "bad \xFF help") == shm::RegisterStatus::kInvalid);
  const double bounds[] = {1.0};
  CHECK(writer.register_series(shm::SeriesKind::kSummary, shm::GaugeMode::kAll, "s", {}, bounds, id) ==
        shm::RegisterStatus::kInvalid);
  // A counter may use `le` (only histograms reserve it), as prometheus_client allows.
  CHECK(writer.register_series(shm::SeriesKind::kCounter, shm::GaugeMode::kAll, "c", {{"le", "1"}}, {}, id) ==
        shm::RegisterStatus::kOk);
  CHECK(shm::shared(block.header().registration_failures).load() == 4);
}

TEST_CASE("A full registry reports kFull and counts the failure", "[cumulative]") {
  SECTION("out of descriptors") {
    CumulativeBlock block({2, 16, 64});
    shm::CumulativeWriter writer = block.writer();
    std::uint32_t id = 0;
    CHECK(writer.register_series(shm::SeriesKind::kCounter, shm::GaugeMode::kAll, "a", {}, {}, id) ==
          shm::RegisterStatus::kOk);
    CHECK(writer.register_series(shm::SeriesKind::kCounter, shm::GaugeMode::kAll, "b", {}, {}, id) ==
          shm::RegisterStatus::kOk);
    CHECK(writer.register_series(shm::SeriesKind::kCounter, shm::GaugeMode::kAll, "c", {}, {}, id) ==
          shm::RegisterStatus::kFull);
    CHECK(failures(block) == 1);
    CHECK(block.reader().published_series() == 2);
  }
  SECTION("out of value words") {
    CumulativeBlock block({16, 16, 4});
    shm::CumulativeWriter writer = block.writer();
    std::uint32_t id = 0;
    CHECK(writer.register_series(shm::SeriesKind::kGauge, shm::GaugeMode::kAll, "g", {}, {}, id) ==
          shm::RegisterStatus::kOk);  // 3 words
    CHECK(writer.register_series(shm::SeriesKind::kGauge, shm::GaugeMode::kAll, "g2", {}, {}, id) ==
          shm::RegisterStatus::kFull);
    CHECK(writer.register_series(shm::SeriesKind::kCounter, shm::GaugeMode::kAll, "c", {}, {}, id) ==
          shm::RegisterStatus::kOk);  // the last word
    CHECK(failures(block) == 1);
  }
  SECTION("out of bucket bounds") {
    CumulativeBlock block({16, 4, 1024});
    shm::CumulativeWriter writer = block.writer();
    std::uint32_t id = 0;
    const double three[] = {1, 2, 3};
    const double other[] = {4, 5};
    CHECK(writer.register_series(shm::SeriesKind::kHistogram, shm::GaugeMode::kAll, "h", {}, three, id) ==
          shm::RegisterStatus::kOk);
    CHECK(writer.register_series(shm::SeriesKind::kHistogram, shm::GaugeMode::kAll, "h2", {}, other, id) ==
          shm::RegisterStatus::kFull);
    CHECK(failures(block) == 1);
  }
}

TEST_CASE("The reader rejects descriptors it cannot trust", "[cumulative]") {
  CumulativeBlock block(kRoomy);
  shm::CumulativeWriter writer = block.writer();
  const double bounds[] = {1, 2, 3};
  std::uint32_t counter = 0;
  std::uint32_t histogram = 0;
  REQUIRE(writer.register_series(shm::SeriesKind::kCounter, shm::GaugeMode::kAll, "c_total", {{"a", "b"}}, {},
                                 counter, 0, "help") == shm::RegisterStatus::kOk);
  REQUIRE(writer.register_series(shm::SeriesKind::kHistogram, shm::GaugeMode::kAll, "h", {}, bounds,
                                 histogram) == shm::RegisterStatus::kOk);
  const shm::CumulativeReader reader = block.reader();
  REQUIRE(reader.read_descriptor(counter));
  REQUIRE(reader.read_descriptor(histogram));

  shm::SeriesDescriptor& c = block.descriptor(counter);
  shm::SeriesDescriptor& h = block.descriptor(histogram);
  SECTION("an unknown kind") {
    c.kind = GENERATE(std::uint8_t{0}, std::uint8_t{5}, std::uint8_t{255});
    CHECK_FALSE(reader.read_descriptor(counter));
  }
  SECTION("an unknown gauge mode") {
    c.gauge_mode = shm::kGaugeModeCount;
    CHECK_FALSE(reader.read_descriptor(counter));
  }
  SECTION("a family name that is empty or lies past the text area") {
    SECTION("empty") {
      c.family_bytes = 0;
    }
    SECTION("past the end") {
      c.family_offset = kRoomy.text_bytes() - 2;
      c.family_bytes = 3;
    }
    SECTION("at a wrapping offset") {
      c.family_offset = 0xFFFFFFFFu;
      c.family_bytes = 0xFFFFFFFFu;
    }
    CHECK_FALSE(reader.read_descriptor(counter));
  }
  SECTION("a family name that is not UTF-8 text") {
    block.region().text[c.family_offset + 1] = static_cast<char>(0xFF);
    CHECK_FALSE(reader.read_descriptor(counter));
  }
  SECTION("a label list whose lengths point past its end") {
    std::uint32_t length = 0;
    SECTION("a name length past the list") {
      length = c.labels_bytes;
      std::memcpy(block.region().text + c.labels_offset, &length, 4);
    }
    SECTION("a value length past the list") {
      length = 0xFFFFFFFFu;
      std::memcpy(block.region().text + c.labels_offset + 5, &length, 4);
    }
    SECTION("a list cut inside a length") {
      c.labels_bytes -= 2;
    }
    CHECK_FALSE(reader.read_descriptor(counter));
  }
  SECTION("a label list or help text past the end of the text area") {
    const std::uint32_t text_bytes = kRoomy.text_bytes();
    SECTION("labels") {
      c.labels_offset = text_bytes - 1;
      c.labels_bytes = 2;
    }
    SECTION("labels at a wrapping offset") {
      c.labels_offset = 0xFFFFFFFFu;
    }
    SECTION("labels longer than the text area") {
      c.labels_offset = 0;
      c.labels_bytes = 0xFFFFFFFFu;
    }
    SECTION("help") {
      c.help_offset = text_bytes;
      c.help_bytes = 1;
    }
    SECTION("help at a wrapping offset") {
      c.help_offset = 0xFFFFFF00u;
      c.help_bytes = 0x100;
    }
    CHECK_FALSE(reader.read_descriptor(counter));
  }
  SECTION("a label value or help text that is not UTF-8") {
    SECTION("label value") {
      // [1]"a"[1]"b": overwrite the value byte with a lone continuation byte.
      block.region().text[c.labels_offset + 9] = static_cast<char>(0x80);
    }
    SECTION("help") {
      block.region().text[c.help_offset] = static_cast<char>(0xC0);
    }
    CHECK_FALSE(reader.read_descriptor(counter));
  }
  SECTION("a histogram with a label named le, or one label twice") {
    const shm::LabelPairs le{{"le", "1"}};
    shm::encode_series_labels(le, block.region().text + c.labels_offset);
    c.labels_bytes = static_cast<std::uint32_t>(shm::encoded_series_label_bytes(le));
    c.kind = static_cast<std::uint8_t>(shm::SeriesKind::kHistogram);
    c.bucket_count = 0;
    CHECK_FALSE(reader.read_descriptor(counter));
  }
  SECTION("values past the end of the values area") {
    c.values_offset = kRoomy.values_capacity;
    CHECK_FALSE(reader.read_descriptor(counter));
    c.values_offset = 0xFFFFFFFFu;
    CHECK_FALSE(reader.read_descriptor(counter));
  }
  SECTION("a counter claiming buckets") {
    c.bucket_count = 2;
    CHECK_FALSE(reader.read_descriptor(counter));
  }
  SECTION("more buckets than allowed") {
    h.bucket_count = shm::kMaxHistogramBuckets + 1;
    CHECK_FALSE(reader.read_descriptor(histogram));
  }
  SECTION("bounds past the end of the bounds area") {
    h.bounds_offset = kRoomy.bounds_capacity - 1;
    CHECK_FALSE(reader.read_descriptor(histogram));
  }
  SECTION("bounds that are not increasing") {
    block.region().bounds[h.bounds_offset + 1] = 0.5;
    CHECK_FALSE(reader.read_descriptor(histogram));
  }
  SECTION("an index beyond the capacity") {
    CHECK_FALSE(reader.read_descriptor(kRoomy.series_capacity));
  }
  SECTION("a series count beyond the capacity is clamped") {
    block.header().series_count = 1000;
    CHECK(reader.published_series() == kRoomy.series_capacity);
  }
}

TEST_CASE("Label lists round-trip through their encoding and malformed bytes decode to nothing",
          "[cumulative]") {
  char buffer[64];
  const shm::LabelPairs labels{{"a", "1"}, {"b_c", ""}, {"d", "x y"}};
  REQUIRE(shm::encode_label_pairs(labels, buffer, sizeof buffer));
  const auto decoded = shm::decode_label_pairs(buffer, sizeof buffer);
  REQUIRE(decoded);
  CHECK(*decoded == labels);

  REQUIRE(shm::encode_label_pairs({}, buffer, sizeof buffer));
  CHECK(shm::decode_label_pairs(buffer, sizeof buffer) == shm::LabelPairs{});

  CHECK_FALSE(shm::encode_label_pairs({{"name", std::string(60, 'v')}}, buffer, sizeof buffer));
  std::memset(buffer, 'z', sizeof buffer);
  CHECK_FALSE(shm::decode_label_pairs(buffer, sizeof buffer));
  std::memcpy(buffer, "name\0value", 10);  // value never terminated within 10 bytes
  CHECK_FALSE(shm::decode_label_pairs(buffer, 10));
}

TEST_CASE(
    "Series label lists carry explicit lengths, so values may hold NUL, and malformed lists decode to "
    "nothing",
    "[cumulative]") {
  const shm::LabelPairs labels{
      {"a", std::string("x\0y", 3)}, {"b_c", ""}, {"d", std::string("\0", 1)}, {"e", std::string(5000, 'v')}};
  std::string buffer(shm::encoded_series_label_bytes(labels), '\0');
  CHECK(buffer.size() == 4 * 8 + 1 + 3 + 3 + 0 + 1 + 1 + 1 + 5000);
  shm::encode_series_labels(labels, buffer.data());
  const auto decoded = shm::decode_series_labels(buffer.data(), buffer.size());
  REQUIRE(decoded);
  CHECK(*decoded == labels);
  CHECK(shm::decode_series_labels(buffer.data(), 0) == shm::LabelPairs{});
  // A cut anywhere but between two labels leaves a length pointing past the list.
  for (std::size_t cut = 1; cut < buffer.size(); ++cut) {
    const bool between = cut == 12 || cut == 23 || cut == 33;
    CHECK(shm::decode_series_labels(buffer.data(), cut).has_value() == between);
  }
  std::uint32_t huge = 0xFFFFFFF0u;
  std::memcpy(buffer.data(), &huge, 4);
  CHECK_FALSE(shm::decode_series_labels(buffer.data(), buffer.size()));
}

TEST_CASE("Long family names, label values and help texts and NUL inside values round-trip through the block",
          "[cumulative]") {
  CumulativeBlock block({64, 64, 1024, 1u << 20});
  shm::CumulativeWriter writer = block.writer();
  const std::string family = "f_" + std::string(198, 'n');
  const std::string help = std::string(10000, 'h') + "\n\\\"";
  const std::string long_value(5000, 'v');
  std::uint32_t one = 0;
  std::uint32_t two = 0;
  std::uint32_t three = 0;
  REQUIRE(writer.register_series(shm::SeriesKind::kCounter, shm::GaugeMode::kAll, family,
                                 {{"v", std::string("a\0b", 3)}}, {}, one, 0,
                                 help) == shm::RegisterStatus::kOk);
  REQUIRE(writer.register_series(shm::SeriesKind::kCounter, shm::GaugeMode::kAll, family,
                                 {{"v", std::string("a\0c", 3)}}, {}, two, 0,
                                 help) == shm::RegisterStatus::kOk);
  REQUIRE(writer.register_series(shm::SeriesKind::kGauge, shm::GaugeMode::kAll, "g",
                                 {{"long", long_value}, {"emoji", "\xF0\x9F\x98\x80"}}, {},
                                 three) == shm::RegisterStatus::kOk);
  const shm::CumulativeReader reader = block.reader();
  const auto a = reader.read_descriptor(one);
  const auto b = reader.read_descriptor(two);
  const auto g = reader.read_descriptor(three);
  REQUIRE(a);
  REQUIRE(b);
  REQUIRE(g);
  CHECK(a->family == family);
  CHECK(a->help == help);
  CHECK(a->labels == shm::LabelPairs{{"v", std::string("a\0b", 3)}});
  CHECK(b->labels == shm::LabelPairs{{"v", std::string("a\0c", 3)}});
  CHECK(g->labels == shm::LabelPairs{{"long", long_value}, {"emoji", "\xF0\x9F\x98\x80"}});
  // The two series of the family share its name and help in the text area.
  CHECK(block.descriptor(one).family_offset == block.descriptor(two).family_offset);
  CHECK(block.descriptor(one).help_offset == block.descriptor(two).help_offset);
}

TEST_CASE("Texts larger than the text area left are refused as full, never cut", "[cumulative]") {
  CumulativeBlock block({4, 4, 64, 256});
  shm::CumulativeWriter writer = block.writer();
  std::uint32_t id = 0;
  CHECK(writer.register_series(shm::SeriesKind::kCounter, shm::GaugeMode::kAll, "c", {}, {}, id, 0,
                               std::string(300, 'h')) == shm::RegisterStatus::kFull);
  CHECK(writer.register_series(shm::SeriesKind::kCounter, shm::GaugeMode::kAll, std::string(300, 'c'), {}, {},
                               id) == shm::RegisterStatus::kFull);
  CHECK(writer.register_series(shm::SeriesKind::kCounter, shm::GaugeMode::kAll, "c",
                               {{"v", std::string(250, 'v')}}, {}, id) == shm::RegisterStatus::kFull);
  CHECK(writer.register_series(shm::SeriesKind::kCounter, shm::GaugeMode::kAll, "c",
                               {{"v", std::string(240, 'v')}}, {}, id) == shm::RegisterStatus::kOk);
  CHECK(failures(block) == 3);
}

TEST_CASE("A reader never accepts a torn gauge or histogram while a writer thread updates them",
          "[cumulative][threads]") {
  CumulativeBlock block(kRoomy);
  shm::CumulativeWriter writer = block.writer();
  const double bounds[] = {1};
  std::uint32_t gauge = 0;
  std::uint32_t histogram = 0;
  REQUIRE(writer.register_series(shm::SeriesKind::kGauge, shm::GaugeMode::kAll, "g", {}, {}, gauge) ==
          shm::RegisterStatus::kOk);
  REQUIRE(writer.register_series(shm::SeriesKind::kHistogram, shm::GaugeMode::kAll, "h", {}, bounds,
                                 histogram) == shm::RegisterStatus::kOk);
  const shm::CumulativeReader reader = block.reader();
  const auto gauge_info = reader.read_descriptor(gauge);
  const auto histogram_info = reader.read_descriptor(histogram);
  REQUIRE(gauge_info);
  REQUIRE(histogram_info);

  constexpr std::uint64_t kUpdates = 200'000;
  std::atomic<bool> done{false};
  // Invariants a consistent snapshot satisfies: set_ns == value + 1, and the sum equals the count.
  std::thread updater([&] {
    for (std::uint64_t i = 0; i < kUpdates; ++i) {
      writer.gauge_set(gauge, static_cast<double>(i), i + 1);
      writer.histogram_observe(histogram, i % 2 == 0 ? 0.5 : 5.0, 1, 1.0);
    }
    done.store(true, std::memory_order_release);
  });

  std::uint64_t torn = 0;
  std::uint64_t consistent_reads = 0;
  shm::SeriesValue value;
  for (;;) {
    const bool finished = done.load(std::memory_order_acquire);
    reader.read_value(*gauge_info, value);
    if (value.consistent) {
      ++consistent_reads;
      if (value.set_ns != 0 && value.set_ns != static_cast<std::uint64_t>(value.value) + 1) ++torn;
    }
    reader.read_value(*histogram_info, value);
    if (value.consistent) {
      ++consistent_reads;
      if (value.sum != static_cast<double>(value.counts[0] + value.counts[1])) ++torn;
    }
    if (finished) break;
  }
  updater.join();

  CHECK(torn == 0);
  CHECK(consistent_reads > 0);
  reader.read_value(*histogram_info, value);
  CHECK(value.counts == std::vector<std::uint64_t>{kUpdates / 2, kUpdates / 2});
  CHECK(value.sum == static_cast<double>(kUpdates));
  reader.read_value(*gauge_info, value);
  CHECK(value.value == static_cast<double>(kUpdates - 1));
}

TEST_CASE("strict UTF-8 is recognised and every invalid byte of a writer's string becomes one U+FFFD") {
  using rankstat::shm::is_valid_utf8;
  using rankstat::shm::replace_invalid_utf8;
  const std::string replacement = "\xEF\xBF\xBD";
  CHECK(is_valid_utf8("llama-3 \xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80"));  // é € 😀
  CHECK_FALSE(is_valid_utf8("\xC0\xAF"));                                // overlong '/'
  CHECK_FALSE(is_valid_utf8("\xED\xA0\x80"));                            // a surrogate
  CHECK_FALSE(is_valid_utf8("\xF4\x90\x80\x80"));                        // above U+10FFFF
  CHECK_FALSE(is_valid_utf8("\xE2\x82"));                                // cut short
  CHECK(replace_invalid_utf8("llama \xC3\xA9") == "llama \xC3\xA9");
  CHECK(replace_invalid_utf8("a\xFF"
                             "b") == "a" + replacement + "b");
  CHECK(replace_invalid_utf8("\xC0\xAF") == replacement + replacement);
  CHECK(replace_invalid_utf8("x\xE2\x82") == "x" + replacement + replacement);
  CHECK(replace_invalid_utf8("\xE2\x82\xAC\xED\xA0\x80!") ==
        "\xE2\x82\xAC" + replacement + replacement + replacement + "!");
  CHECK(is_valid_utf8(replace_invalid_utf8(std::string("\x80\x81\xFE\xFF\0z", 6))));
}
