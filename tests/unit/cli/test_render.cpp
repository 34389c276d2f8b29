#include <catch2/catch.hpp>

#include <boost/json/parse.hpp>
#include <string>
#include <vector>

#include "render.hpp"

using namespace rankstat::cli;

namespace {

std::string plain(const std::vector<StyledLine>& lines) {
  std::string text;
  for (const StyledLine& line : lines) text += line.render(false) + "\n";
  return text;
}

boost::json::object object_of(const char* json) {
  return boost::json::parse(json).as_object();
}

}  // namespace

TEST_CASE("the ranks table shows one row per rank with its ranks, state, age and fill") {
  const auto doc = object_of(R"({"ranks":[{"id":"a.scheduler.tp0-pp0-ep0","instance":"a","role":"scheduler",
      "rank_key":"tp0-pp0-ep0","ranks":{"tp_rank":0,"pp_rank":0,"dp_rank":1,"moe_ep_rank":0},"pid":4242,
      "state":"LIVE","heartbeat_age_seconds":0.5,"records_per_second":1234,"ring_fill_ratio":0.25,
      "dropped_records":3,"oversize_records":0,"layout_version":"1"}],"rejected_segments":{}})");
  const auto lines = render_ranks(doc);
  REQUIRE(lines.size() == 2);
  const std::string header = lines[0].render(false);
  CHECK(header.find("INSTANCE") != std::string::npos);
  CHECK(header.find("STATE") != std::string::npos);
  const std::string row = lines[1].render(false);
  for (const char* part : {"a ", "scheduler", "tp0-pp0-ep0", "4242", "LIVE", "0.5s", "1.2k", "25%", "3"}) {
    INFO(part);
    CHECK(row.find(part) != std::string::npos);
  }
  CHECK(lines[1].render(true).find("\x1b[") != std::string::npos);  // the state is coloured
}

TEST_CASE("the ranks table says when there are no ranks and lists rejected segments") {
  const auto text = plain(render_ranks(object_of(R"({"ranks":[],"rejected_segments":{"bad_magic":2}})")));
  CHECK(text.find("(no ranks)") != std::string::npos);
  CHECK(text.find("rejected segments: bad_magic=2") != std::string::npos);
}

TEST_CASE("an untrusted rank is named under the table with its warning") {
  const auto text = plain(render_ranks(
      object_of(R"({"ranks":[{"id":"x.scheduler.tp0","state":"LIVE","warning":"owned by uid 1234"}]})")));
  CHECK(text.find("untrusted: x.scheduler.tp0 is owned by uid 1234") != std::string::npos);
}

TEST_CASE("histogram quantiles interpolate within buckets as Prometheus does") {
  const auto histogram = object_of(R"({"buckets":[{"le":1,"cumulative_count":10},
      {"le":2,"cumulative_count":20},{"le":null,"cumulative_count":20}]})");
  CHECK(histogram_quantile(0.5, histogram) == Approx(1.0));
  CHECK(histogram_quantile(0.75, histogram) == Approx(1.5));
  CHECK_FALSE(histogram_quantile(0.5, object_of(R"({"buckets":[]})")));
  const auto in_inf =
      object_of(R"({"buckets":[{"le":1,"cumulative_count":1},{"le":null,"cumulative_count":10}]})");
  CHECK(histogram_quantile(0.99, in_inf) == Approx(1.0));
}

TEST_CASE("a rank's page starts with its id and state and lists its ranks") {
  const auto text = plain(render_rank(object_of(
      R"({"id":"a.scheduler.tp0-pp0-ep0","state":"STALLED","model_name":"m","pid":7,
          "ranks":{"tp_rank":0,"tp_size":2,"pp_rank":0,"pp_size":1}})")));
  CHECK(text.starts_with("a.scheduler.tp0-pp0-ep0  STALLED\n"));
  CHECK(text.find("model m") != std::string::npos);
  CHECK(text.find("tp 0/2") != std::string::npos);
}
