// Segment names: the directory listing is the registry, so parsing must accept exactly what
// segment_name produces and nothing a half-created or foreign file could look like.
#include <cstdint>
#include <optional>
#include <string>

#include <catch2/catch.hpp>

#include "rankstat/shmproto/naming.hpp"

namespace {

namespace shm = rankstat::shm;

}  // namespace

TEST_CASE("A segment name round-trips through parse_segment_name for every role", "[naming]") {
  const shm::Role role =
      GENERATE(shm::Role::kScheduler, shm::Role::kTokenizer, shm::Role::kDetokenizer, shm::Role::kOther);
  const std::string name = shm::segment_name("prod-A_1", role, "tp3-pp1-ep0-dp2");
  CHECK(name == "rankstat.prod-A_1." + std::string(shm::role_name(role)) + ".tp3-pp1-ep0-dp2");
  const auto parsed = shm::parse_segment_name(name);
  REQUIRE(parsed);
  CHECK(parsed->instance == "prod-A_1");
  CHECK(parsed->role == role);
  CHECK(parsed->rank_key == "tp3-pp1-ep0-dp2");
  CHECK(shm::role_from_name(shm::role_name(role)) == role);
}

TEST_CASE("Scheduler rank keys name every rank and the dp rank only when it is set", "[naming]") {
  CHECK(shm::scheduler_rank_key(1, 0, 2, shm::kRankUnset) == "tp1-pp0-ep2");
  CHECK(shm::scheduler_rank_key(1, 0, 2, 3) == "tp1-pp0-ep2-dp3");
  CHECK(shm::is_valid_name_component(shm::scheduler_rank_key(1023, 63, 255, 127)));
}

TEST_CASE("parse_segment_name rejects temporaries, dots, unknown roles and foreign files", "[naming]") {
  const char* rejected =
      GENERATE("rankstat.inst.scheduler.tp0-pp0-ep0.tmp.123.456",  // a segment still being created
               "rankstat.inst.scheduler.tp0.pp0",                  // a dot inside the rank key
               "rankstat.inst.sched.tp0",                          // unknown role
               "rankstat.inst.unknown.tp0",                        // kUnknown has no name of its own
               "rankstat.inst.scheduler.",                         // empty rank key
               "rankstat..scheduler.tp0",                          // empty instance
               "rankstat.inst.scheduler",                          // no rank key at all
               "rankstat.inst",                                    //
               "rankstat.",                                        //
               "other.inst.scheduler.tp0",                         // foreign prefix
               "rankstat.in$t.scheduler.tp0",                      // character outside [A-Za-z0-9_-]
               "rankstat.inst.scheduler.tp0/x",                    // a slash
               ".rankstat.inst.scheduler.tp0");                    // hidden file
  INFO(rejected);
  CHECK_FALSE(shm::parse_segment_name(rejected));
}

TEST_CASE("Name components are 1 to 47 characters of letters, digits, underscore and dash", "[naming]") {
  CHECK(shm::is_valid_name_component("a"));
  CHECK(shm::is_valid_name_component(std::string(47, 'x')));
  CHECK_FALSE(shm::is_valid_name_component(std::string(48, 'x')));
  CHECK_FALSE(shm::is_valid_name_component(""));
  CHECK_FALSE(shm::is_valid_name_component("a.b"));
  CHECK_FALSE(shm::is_valid_name_component("a b"));
  CHECK_FALSE(shm::is_valid_name_component("caf\xc3\xa9"));
  const auto max_name =
      shm::segment_name(std::string(47, 'i'), shm::Role::kDetokenizer, std::string(47, 'k'));
  CHECK(shm::parse_segment_name(max_name));
}

TEST_CASE("parse_temporary_pid recovers the creator of an abandoned temporary", "[naming]") {
  CHECK(shm::parse_temporary_pid("rankstat.inst.scheduler.tp0-pp0-ep0.tmp.4242.99887766") ==
        std::optional<std::uint32_t>(4242));
  CHECK_FALSE(shm::parse_temporary_pid("rankstat.inst.scheduler.tp0-pp0-ep0"));
  CHECK_FALSE(shm::parse_temporary_pid("rankstat.inst.scheduler.tp0.tmp.4242"));           // no nonce
  CHECK_FALSE(shm::parse_temporary_pid("rankstat.inst.scheduler.tp0.tmp..1"));             // no pid
  CHECK_FALSE(shm::parse_temporary_pid("rankstat.inst.scheduler.tp0.tmp.99999999999.1"));  // overflow
  CHECK_FALSE(shm::parse_temporary_pid("foreign.tmp.1.2"));
}
