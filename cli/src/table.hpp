// Aligned text tables with optional ANSI styling. All cell text is ASCII, so a byte is a column.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace rankstat::cli {

// SGR parameters ("1", "31", "2;37"); empty for no styling.
namespace style {
inline constexpr const char* kNone = "";
inline constexpr const char* kBold = "1";
inline constexpr const char* kDim = "2";
inline constexpr const char* kRed = "31";
inline constexpr const char* kGreen = "32";
inline constexpr const char* kYellow = "33";
inline constexpr const char* kCyan = "36";
inline constexpr const char* kReverse = "7";
inline constexpr const char* kBoldRed = "1;31";
}  // namespace style

struct Segment {
  std::string text;
  const char* sgr = style::kNone;
};

// One table cell: a run of styled segments.
struct Cell {
  std::vector<Segment> parts;

  Cell() = default;
  Cell(std::string text, const char* sgr = style::kNone) {
    parts.push_back({std::move(text), sgr});
  }  // NOLINT
  std::size_t width() const;
};

// A line of styled segments, rendered with or without escapes and cut to a width.
struct StyledLine {
  std::vector<Segment> parts;

  void add(std::string text, const char* sgr = style::kNone) { parts.push_back({std::move(text), sgr}); }
  std::size_t width() const;
  // At most `max_width` visible columns (0 = unlimited); escapes only when `color`.
  std::string render(bool color, std::size_t max_width = 0) const;
};

enum class Align { kLeft, kRight };

struct Column {
  std::string title;
  Align align = Align::kLeft;
};

class Table {
 public:
  explicit Table(std::vector<Column> columns) : columns_(std::move(columns)) {}
  void add_row(std::vector<Cell> cells) { rows_.push_back(std::move(cells)); }
  std::size_t rows() const { return rows_.size(); }
  // The header line (styled `header_sgr`) followed by one line per row, columns two spaces apart.
  std::vector<StyledLine> layout(const char* header_sgr = style::kBold) const;

 private:
  std::vector<Column> columns_;
  std::vector<std::vector<Cell>> rows_;
};

}  // namespace rankstat::cli
