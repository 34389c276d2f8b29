#include <catch2/catch.hpp>

#include "table.hpp"

using namespace rankstat::cli;

TEST_CASE("a table aligns columns two spaces apart, numbers to the right") {
  Table table({{"NAME"}, {"N", Align::kRight}});
  table.add_row({Cell("a"), Cell("1234")});
  table.add_row({Cell("longer"), Cell("5")});
  const auto lines = table.layout();
  REQUIRE(lines.size() == 3);
  CHECK(lines[0].render(false) == "NAME       N");
  CHECK(lines[1].render(false) == "a       1234");
  CHECK(lines[2].render(false) == "longer     5");
  CHECK(table.rows() == 2);
}

TEST_CASE("a styled line has escapes only in color and is cut to a width") {
  StyledLine line;
  line.add("LIVE", style::kGreen);
  line.add(" rest");
  CHECK(line.render(false) == "LIVE rest");
  CHECK(line.render(true) == "\x1b[32mLIVE\x1b[0m rest");
  CHECK(line.render(false, 6) == "LIVE r");
  CHECK(line.render(true, 2) == "\x1b[32mLI\x1b[0m");
  CHECK(line.width() == 9);
}

TEST_CASE("a row with fewer cells than columns is padded with empty cells") {
  Table table({{"A"}, {"B"}});
  table.add_row({Cell("x")});
  const auto lines = table.layout(style::kNone);
  REQUIRE(lines.size() == 2);
  CHECK(lines[1].render(true) == "x  ");
}
