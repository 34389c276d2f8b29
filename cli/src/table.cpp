#include "table.hpp"

#include <algorithm>

namespace rankstat::cli {

std::size_t Cell::width() const {
  std::size_t w = 0;
  for (const Segment& s : parts) w += s.text.size();
  return w;
}

std::size_t StyledLine::width() const {
  std::size_t w = 0;
  for (const Segment& s : parts) w += s.text.size();
  return w;
}

std::string StyledLine::render(bool color, std::size_t max_width) const {
  std::string out;
  std::size_t used = 0;
  for (const Segment& s : parts) {
    std::string_view text = s.text;
    if (max_width != 0) {
      if (used >= max_width) break;
      if (text.size() > max_width - used) text = text.substr(0, max_width - used);
    }
    const bool styled = color && s.sgr[0] != '\0' && !text.empty();
    if (styled) out.append("\x1b[").append(s.sgr).append("m");
    out.append(text);
    if (styled) out.append("\x1b[0m");
    used += text.size();
  }
  return out;
}

std::vector<StyledLine> Table::layout(const char* header_sgr) const {
  std::vector<std::size_t> widths(columns_.size());
  for (std::size_t c = 0; c < columns_.size(); ++c) widths[c] = columns_[c].title.size();
  for (const auto& row : rows_) {
    for (std::size_t c = 0; c < columns_.size() && c < row.size(); ++c)
      widths[c] = std::max(widths[c], row[c].width());
  }
  auto place = [&](StyledLine& line, std::size_t c, const Cell& cell, bool last) {
    const std::size_t pad = widths[c] - std::min(widths[c], cell.width());
    if (columns_[c].align == Align::kRight && pad > 0) line.add(std::string(pad, ' '));
    for (const Segment& s : cell.parts) line.parts.push_back(s);
    if (columns_[c].align == Align::kLeft && pad > 0 && !last) line.add(std::string(pad, ' '));
    if (!last) line.add("  ");
  };
  std::vector<StyledLine> lines;
  StyledLine header;
  for (std::size_t c = 0; c < columns_.size(); ++c)
    place(header, c, Cell(columns_[c].title, header_sgr), c + 1 == columns_.size());
  lines.push_back(std::move(header));
  for (const auto& row : rows_) {
    StyledLine line;
    for (std::size_t c = 0; c < columns_.size(); ++c) {
      place(line, c, c < row.size() ? row[c] : Cell(), c + 1 == columns_.size());
    }
    lines.push_back(std::move(line));
  }
  return lines;
}

}  // namespace rankstat::cli
