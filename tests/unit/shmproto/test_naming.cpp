// Segment names: the directory listing is the registry, so parsing must accept exactly what
// segment_name produces and nothing a half-created or foreign file could look like.
#include <cstdint>
#include <optional>
#include <string>

#include <catch2/catch.hpp>

#include "rankstat/shmproto/naming.hpp"
#include "rankstat/shmproto/scheduler_snapshot.hpp"

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

TEST_CASE("gauge modes and report kinds read as prometheus_client and SGLang name them", "[naming]") {
  using rankstat::shm::GaugeMode;
  CHECK(rankstat::shm::gauge_mode_name(GaugeMode::kAll) == "all");
  CHECK(rankstat::shm::gauge_mode_name(GaugeMode::kLiveSum) == "livesum");
  CHECK(rankstat::shm::gauge_mode_name(GaugeMode::kLiveMostRecent) == "livemostrecent");
  CHECK(rankstat::shm::gauge_mode_name(static_cast<GaugeMode>(rankstat::shm::kGaugeModeCount)) == "unknown");
  CHECK(rankstat::shm::report_kind_name(1) == "prefill");
  CHECK(rankstat::shm::report_kind_name(3) == "idle");
  CHECK(rankstat::shm::report_kind_name(99) == "unspecified");
}

TEST_CASE("a snapshot's scalar fields read back as written, optional groups only when sent", "[naming]") {
  rankstat::shm::SchedulerSnapshot s{};
  s.num_running_reqs = 42;
  s.token_usage = 0.75;
  s.spec_accept_rate = 0.5;
  int present = 0;
  for (const auto& field : rankstat::shm::kSchedulerScalarFields) {
    const auto value = rankstat::shm::read_scalar(s, field);
    CHECK(value.is_integer == (field.type == rankstat::shm::FieldType::kI64));
    if (std::string_view(field.name) == "num_running_reqs") CHECK(value.as_double() == 42);
    if (std::string_view(field.name) == "token_usage") CHECK(value.real == 0.75);
    if (std::string_view(field.name) == "spec_accept_rate") {
      CHECK_FALSE(rankstat::shm::field_present(s, field));
      s.groups |= rankstat::shm::kGroupSpeculative;
      CHECK(rankstat::shm::field_present(s, field));
      CHECK(value.real == 0.5);
    }
    if (field.group == 0) ++present;
  }
  CHECK(present > 20);
}

TEST_CASE("rank numbers list every parallelism coordinate under the names readers show", "[naming]") {
  rankstat::shm::SegmentHeader h{};
  h.tp_rank = 3;
  h.dp_size = 8;
  h.layout_major = 1;
  h.layout_minor = 2;
  const auto numbers = rankstat::shm::rank_numbers(h);
  CHECK(std::string_view(numbers[0].name) == "tp_rank");
  CHECK(numbers[0].value == 3);
  CHECK(std::string_view(numbers[9].name) == "dp_size");
  CHECK(numbers[9].value == 8);
  CHECK(rankstat::shm::layout_version_text(h) == "1.2");
}
