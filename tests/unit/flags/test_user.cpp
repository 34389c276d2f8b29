#include <catch2/catch.hpp>

#include "rankstat/flags/user.hpp"

using rankstat::flags::resolve_uid;

TEST_CASE("a user flag takes a numeric uid as given and looks a name up in the user database") {
  CHECK(resolve_uid("0") == 0u);
  CHECK(resolve_uid("4243") == 4243u);
  CHECK(resolve_uid("4294967294") == 4294967294u);
  CHECK(resolve_uid("root") == 0u);  // every Debian system has it
}

TEST_CASE("a user flag refuses what is neither a uid nor a known user") {
  CHECK_FALSE(resolve_uid(""));
  CHECK_FALSE(resolve_uid("4294967295"));   // (uid_t)-1 means "no user"
  CHECK_FALSE(resolve_uid("99999999999"));  // more than 32 bits
  CHECK_FALSE(resolve_uid("no-such-user-rankstat-test"));
}
