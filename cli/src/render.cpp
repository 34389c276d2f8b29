#include "render.hpp"

#include <algorithm>
#include <boost/json/value.hpp>
#include <cmath>
#include <map>

#include "format.hpp"
#include "rankstat/shmproto/liveness.hpp"

namespace rankstat::cli {
namespace {

std::string rank_label(const boost::json::value& doc, std::string_view key) {
  const auto v = number_at(doc, {"ranks", key});
  return v ? format_fixed(v, 0) : "-";
}

std::string bytes_text(double bytes) {
  if (bytes >= 1 << 30) return format_fixed(bytes / (1 << 30), 0) + " GiB";
  if (bytes >= 1 << 20) return format_fixed(bytes / (1 << 20), 0) + " MiB";
  return format_fixed(bytes / 1024, 0) + " KiB";
}

// "tp 0/2" from a rank and a size, "-" parts left out.
std::string rank_of(const boost::json::value& doc, std::string_view name, std::string_view rank_key,
                    std::string_view size_key) {
  const auto rank = number_at(doc, {"ranks", rank_key});
  if (!rank) return {};
  std::string text = std::string(name) + " " + format_fixed(rank, 0);
  if (!size_key.empty()) {
    if (const auto size = number_at(doc, {"ranks", size_key})) text += "/" + format_fixed(size, 0);
  }
  return text;
}

std::string labels_text(const boost::json::value& series) {
  const auto* labels = find_path(series, {"labels"});
  if (labels == nullptr || !labels->is_object() || labels->as_object().empty()) return {};
  std::string text = "{";
  bool first = true;
  for (const auto& [name, value] : labels->as_object()) {
    if (!first) text += ",";
    first = false;
    text += std::string(name) + "=\"" + format_scalar(value) + "\"";
  }
  return text + "}";
}

// Sections of SGLang's SchedulerStats, in the order its metrics collector lists them.
constexpr std::string_view kSectionOrder[] = {"basics",         "pool",    "speculative", "retraction",
                                              "disaggregation", "forward", "lora",        "hicache",
                                              "sessions",       "routing"};

}  // namespace

const char* state_style(std::string_view state) {
  switch (shm::rank_state_from_name(state).value_or(shm::RankState::kClosed)) {
    case shm::RankState::kLive:
      return style::kGreen;
    case shm::RankState::kStalled:
      return style::kYellow;
    case shm::RankState::kDead:
      return style::kBoldRed;
    case shm::RankState::kClosed:
      break;
  }
  return style::kDim;
}

std::vector<StyledLine> render_ranks(const boost::json::object& doc) {
  Table table({{"INSTANCE"},
               {"ROLE"},
               {"RANK"},
               {"TP", Align::kRight},
               {"PP", Align::kRight},
               {"DP", Align::kRight},
               {"EP", Align::kRight},
               {"PID", Align::kRight},
               {"STATE"},
               {"HEARTBEAT", Align::kRight},
               {"REC/S", Align::kRight},
               {"FILL", Align::kRight},
               {"DROPS", Align::kRight},
               {"LAYOUT"}});
  const boost::json::value root(doc);
  const auto* ranks = find_path(root, {"ranks"});
  if (ranks != nullptr && ranks->is_array()) {
    for (const auto& r : ranks->as_array()) {
      const std::string state = string_at(r, {"state"}, "?");
      const auto drops =
          number_at(r, {"dropped_records"}).value_or(0) + number_at(r, {"oversize_records"}).value_or(0);
      table.add_row({Cell(string_at(r, {"instance"})), Cell(string_at(r, {"role"})),
                     Cell(string_at(r, {"rank_key"})), Cell(rank_label(r, "tp_rank")),
                     Cell(rank_label(r, "pp_rank")), Cell(rank_label(r, "dp_rank")),
                     Cell(rank_label(r, "moe_ep_rank")), Cell(format_fixed(number_at(r, {"pid"}), 0)),
                     Cell(state, state_style(state)),
                     Cell(format_age(number_at(r, {"heartbeat_age_seconds"}).value_or(kNoValue))),
                     Cell(format_rate(number_at(r, {"records_per_second"}).value_or(kNoValue))),
                     Cell(format_percent(number_at(r, {"ring_fill_ratio"}))),
                     Cell(format_count(drops), drops > 0 ? style::kYellow : style::kNone),
                     Cell(string_at(r, {"layout_version"}))});
    }
  }
  std::vector<StyledLine> lines = table.layout();
  if (table.rows() == 0) {
    StyledLine none;
    none.add("(no ranks)", style::kDim);
    lines.push_back(std::move(none));
  }
  if (ranks != nullptr && ranks->is_array()) {
    for (const auto& r : ranks->as_array()) {
      const std::string warning = string_at(r, {"warning"});
      if (warning.empty()) continue;
      StyledLine line;
      line.add("untrusted: ", style::kBoldRed);
      line.add(string_at(r, {"id"}) + " is " + warning);
      lines.push_back(std::move(line));
    }
  }
  const auto* rejected = find_path(root, {"rejected_segments"});
  if (rejected != nullptr && rejected->is_object()) {
    if (auto line = rejected_segments_line(rejected->as_object())) lines.push_back(std::move(*line));
  }
  return lines;
}

std::optional<StyledLine> rejected_segments_line(const boost::json::object& rejected_segments) {
  if (rejected_segments.empty()) return std::nullopt;
  StyledLine line;
  line.add("rejected segments:", style::kYellow);
  for (const auto& [reason, count] : rejected_segments) {
    line.add(" " + std::string(reason) + "=" + format_scalar(count));
  }
  return line;
}

std::optional<double> histogram_quantile(double q, const boost::json::object& histogram) {
  const auto* buckets = histogram.if_contains("buckets");
  if (buckets == nullptr || !buckets->is_array() || buckets->as_array().empty()) return std::nullopt;
  const auto& list = buckets->as_array();
  const auto total = number_at(list.back(), {"cumulative_count"});
  if (!total || *total <= 0) return std::nullopt;
  const double rank = q * *total;
  double lower_bound = 0;
  double lower_count = 0;
  for (const auto& b : list) {
    const auto count = number_at(b, {"cumulative_count"}).value_or(0);
    const auto* le = find_path(b, {"le"});
    const auto upper = le != nullptr ? as_number(*le) : std::nullopt;
    if (count >= rank) {
      if (!upper) return lower_bound;  // in the +Inf bucket: the highest finite bound, as Prometheus does
      if (count == lower_count) return *upper;
      return lower_bound + (*upper - lower_bound) * (rank - lower_count) / (count - lower_count);
    }
    if (upper) lower_bound = *upper;
    lower_count = count;
  }
  return lower_bound;
}

std::vector<StyledLine> render_rank(const boost::json::object& detail) {
  const boost::json::value doc(detail);
  std::vector<StyledLine> lines;
  auto text_line = [&](std::string text, const char* sgr = style::kNone) {
    StyledLine line;
    line.add(std::move(text), sgr);
    lines.push_back(std::move(line));
  };
  const std::string state = string_at(doc, {"state"}, "?");
  {
    StyledLine title;
    title.add(string_at(doc, {"id"}), style::kBold);
    title.add("  ");
    title.add(state, state_style(state));
    lines.push_back(std::move(title));
  }
  text_line("  model " + string_at(doc, {"model_name"}, "-") + "   engine " +
            string_at(doc, {"engine_type"}, "-") + "   pid " + format_fixed(number_at(doc, {"pid"}), 0) +
            "   generation " + string_at(doc, {"generation"}, "-") + "   layout " +
            string_at(doc, {"layout_version"}, "-"));
  std::string ranks_text = "  ranks";
  for (const auto& part :
       {rank_of(doc, "tp", "tp_rank", "tp_size"), rank_of(doc, "pp", "pp_rank", "pp_size"),
        rank_of(doc, "dp", "dp_rank", "dp_size"), rank_of(doc, "ep", "moe_ep_rank", ""),
        rank_of(doc, "attn_tp", "attn_tp_rank", ""), rank_of(doc, "attn_dp", "attn_dp_rank", ""),
        rank_of(doc, "attn_cp", "attn_cp_rank", "")}) {
    if (!part.empty()) ranks_text += "   " + part;
  }
  text_line(ranks_text);
  std::string flags;
  if (const auto* p = find_path(doc, {"priority_scheduling"});
      p != nullptr && p->is_bool() && p->get_bool()) {
    flags += "   priority scheduling";
  }
  if (const auto* a = find_path(doc, {"all_schedulers_metrics"});
      a != nullptr && a->is_bool() && a->get_bool()) {
    flags += "   all-schedulers metrics";
  }
  const auto drained = number_at(doc, {"records_drained"});
  text_line("  heartbeat " + format_age(number_at(doc, {"heartbeat_age_seconds"}).value_or(kNoValue)) +
            " ago   records " + format_fixed(number_at(doc, {"records_written"}), 0) + " written" +
            (drained ? ", " + format_fixed(drained, 0) + " drained" : std::string()) + ", " +
            format_rate(number_at(doc, {"records_per_second"}).value_or(kNoValue)) + "/s" + flags);
  const auto* quarantined = find_path(doc, {"ring_quarantined"});
  const bool is_quarantined = quarantined != nullptr && quarantined->is_bool() && quarantined->get_bool();
  text_line("  ring " + bytes_text(number_at(doc, {"ring_bytes"}).value_or(0)) + ", " +
                format_percent(number_at(doc, {"ring_fill_ratio"})) + " full, " +
                format_fixed(number_at(doc, {"dropped_records"}), 0) + " dropped, " +
                format_fixed(number_at(doc, {"oversize_records"}), 0) + " oversize" +
                (is_quarantined ? "   QUARANTINED (ring indices inconsistent)" : ""),
            is_quarantined ? style::kBoldRed : style::kNone);

  const auto* scheduler = find_path(doc, {"scheduler"});
  text_line("");
  if (scheduler == nullptr || !scheduler->is_object()) {
    text_line("scheduler snapshot: none reported yet", style::kDim);
  } else {
    text_line("scheduler snapshot (" + string_at(*scheduler, {"report_kind"}, "?") + " report #" +
                  format_fixed(number_at(*scheduler, {"sequence"}), 0) + ", " +
                  format_age(number_at(*scheduler, {"age_seconds"}).value_or(kNoValue)) + " ago)",
              style::kBold);
    const auto* fields = find_path(*scheduler, {"fields"});
    if (fields != nullptr && fields->is_object()) {
      const auto& sections = fields->as_object();
      std::vector<std::string_view> order(std::begin(kSectionOrder), std::end(kSectionOrder));
      for (const auto& [name, value] : sections) {
        if (name != "priorities" && std::find(order.begin(), order.end(), name) == order.end())
          order.push_back(name);
      }
      // One column of values for every section, so the numbers line up down the page.
      std::size_t name_width = 0;
      for (std::string_view section : order) {
        const auto* values = sections.if_contains(section);
        if (values == nullptr || !values->is_object()) continue;
        for (const auto& [field, value] : values->as_object())
          name_width = std::max(name_width, field.size());
      }
      for (std::string_view section : order) {
        const auto* values = sections.if_contains(section);
        if (values == nullptr || !values->is_object() || values->as_object().empty()) continue;
        text_line("  " + std::string(section), style::kCyan);
        for (const auto& [field, value] : values->as_object()) {
          std::string text = format_scalar(value);
          std::string line = "    " + std::string(field);
          line.append(name_width - field.size() + 2, ' ');
          line.append(text.size() < 14 ? 14 - text.size() : 0, ' ');
          text_line(line + text);
        }
      }
      const auto* priorities = sections.if_contains("priorities");
      if (priorities != nullptr && priorities->is_array() && !priorities->as_array().empty()) {
        text_line("  by priority", style::kCyan);
        Table t({{"    QUEUE"}, {"PRIORITY", Align::kRight}, {"COUNT", Align::kRight}});
        for (const auto& e : priorities->as_array()) {
          const auto* p = find_path(e, {"priority"});
          t.add_row({Cell("    " + string_at(e, {"queue"})),
                     Cell(p == nullptr || p->is_null() ? "none" : format_scalar(*p)),
                     Cell(format_fixed(number_at(e, {"count"}), 0))});
        }
        for (auto& l : t.layout(style::kDim)) lines.push_back(std::move(l));
      }
    }
  }

  const auto* series = find_path(doc, {"series"});
  if (series == nullptr || !series->is_array() || series->as_array().empty()) {
    text_line("");
    text_line("no counters, gauges or histograms registered", style::kDim);
    return lines;
  }
  Table counters({{"COUNTER"}, {"VALUE", Align::kRight}});
  Table gauges({{"GAUGE"}, {"MODE"}, {"VALUE", Align::kRight}});
  Table histograms({{"HISTOGRAM"},
                    {"COUNT", Align::kRight},
                    {"SUM", Align::kRight},
                    {"MEAN", Align::kRight},
                    {"P50", Align::kRight},
                    {"P90", Align::kRight},
                    {"P99", Align::kRight}});
  // NaN for "no value": keeps GCC's -Wmaybe-uninitialized quiet about optionals at -O2.
  auto short_number = [](double v) {
    if (!std::isfinite(v)) return std::string("-");
    char text[32];
    std::snprintf(text, sizeof text, "%.4g", v);
    return std::string(text);
  };
  for (const auto& s : series->as_array()) {
    const std::string name = string_at(s, {"family"}) + labels_text(s);
    const std::string type = string_at(s, {"type"});
    const auto* value = find_path(s, {"value"});
    const std::string value_text = value == nullptr || value->is_null() ? "-" : format_scalar(*value);
    if (type == "counter") {
      counters.add_row({Cell(name), Cell(value_text)});
    } else if (type == "gauge") {
      gauges.add_row({Cell(name), Cell(string_at(s, {"mode"})), Cell(value_text)});
    } else if (type == "histogram" && s.is_object()) {
      const double count = number_at(s, {"count"}).value_or(kNoValue);
      const double sum = number_at(s, {"sum"}).value_or(kNoValue);
      const double mean = count > 0 ? sum / count : kNoValue;
      histograms.add_row({Cell(name), Cell(format_fixed(count, 0)), Cell(short_number(sum)),
                          Cell(short_number(mean)),
                          Cell(short_number(histogram_quantile(0.5, s.as_object()).value_or(kNoValue))),
                          Cell(short_number(histogram_quantile(0.9, s.as_object()).value_or(kNoValue))),
                          Cell(short_number(histogram_quantile(0.99, s.as_object()).value_or(kNoValue)))});
    }
  }
  for (const Table* t : {&counters, &gauges, &histograms}) {
    if (t->rows() == 0) continue;
    text_line("");
    for (auto& l : t->layout()) lines.push_back(std::move(l));
  }
  return lines;
}

}  // namespace rankstat::cli
