#include <catch2/catch.hpp>

#include <boost/json/parse.hpp>

#include "rank_lookup.hpp"

using namespace rankstat::cli;

namespace {

boost::json::object two_instances() {
  return boost::json::parse(R"({"ranks":[
    {"id":"a.scheduler.tp0-pp0-ep0","instance":"a","rank_key":"tp0-pp0-ep0"},
    {"id":"b.scheduler.tp0-pp0-ep0","instance":"b","rank_key":"tp0-pp0-ep0"},
    {"id":"a.scheduler.tp1-pp0-ep0","instance":"a","rank_key":"tp1-pp0-ep0"}]})")
      .as_object();
}

}  // namespace

TEST_CASE("a rank id is plausible only with letters, digits, dots, dashes and underscores") {
  CHECK(is_plausible_rank_id("a.scheduler.tp0-pp0-ep0"));
  CHECK(is_plausible_rank_id("x_y"));
  CHECK_FALSE(is_plausible_rank_id(""));
  CHECK_FALSE(is_plausible_rank_id("a/../b"));
  CHECK_FALSE(is_plausible_rank_id("a b"));
  CHECK_FALSE(is_plausible_rank_id(std::string(161, 'a')));
}

TEST_CASE("a full rank id matches exactly one rank") {
  CHECK(match_rank(two_instances(), "a.scheduler.tp0-pp0-ep0").ids ==
        std::vector<std::string>{"a.scheduler.tp0-pp0-ep0"});
}

TEST_CASE("a rank key alone matches every instance's rank with that key") {
  CHECK(match_rank(two_instances(), "tp0-pp0-ep0").ids.size() == 2);
  CHECK(match_rank(two_instances(), "tp1-pp0-ep0").ids ==
        std::vector<std::string>{"a.scheduler.tp1-pp0-ep0"});
}

TEST_CASE("instance dot rank key picks one instance's rank") {
  CHECK(match_rank(two_instances(), "b.tp0-pp0-ep0").ids ==
        std::vector<std::string>{"b.scheduler.tp0-pp0-ep0"});
}

TEST_CASE("an unknown rank or a document without ranks matches nothing") {
  CHECK(match_rank(two_instances(), "tp9").ids.empty());
  CHECK(match_rank(boost::json::object{}, "tp0").ids.empty());
}
