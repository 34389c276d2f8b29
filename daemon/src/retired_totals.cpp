#include "retired_totals.hpp"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <boost/json/value.hpp>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <optional>
#include <random>
#include <span>
#include <stdexcept>
#include <string_view>
#include <unordered_map>
#include <utility>

#include "rankstat/shmproto/cumulative.hpp"
#include "rankstat/shmproto/segment.hpp"

namespace rankstat {
namespace {

constexpr int kStateVersion = 1;

boost::json::array labels_json(const Labels& labels) {
  boost::json::array out;
  for (const auto& l : labels)
    out.push_back(boost::json::array{boost::json::string(l.name), boost::json::string(l.value)});
  return out;
}

Labels labels_from(const boost::json::array& in) {
  Labels out;
  for (const auto& pair : in) {
    const auto& p = pair.as_array();
    out.push_back({std::string(p.at(0).as_string()), std::string(p.at(1).as_string())});
  }
  return out;
}

// A series as the exposition would emit it: valid names, UTF-8 values, no duplicate or reserved label.
// The state file is input like any segment: a forged family name with a newline must not reach /metrics.
bool valid_series(const std::string& family, const Labels& labels, std::string& why) {
  if (!shm::is_valid_metric_name(family)) {
    why = "invalid family name";
    return false;
  }
  for (std::size_t i = 0; i < labels.size(); ++i) {
    const auto& l = labels[i];
    if (!shm::is_valid_label_name(l.name) || l.name.starts_with("__") || l.name == "le" ||
        l.name == "quantile") {
      why = "invalid or reserved label name";
      return false;
    }
    if (!shm::is_valid_utf8(l.value)) {
      why = "label value not UTF-8";
      return false;
    }
    for (std::size_t j = 0; j < i; ++j) {
      if (labels[j].name == l.name) {
        why = "duplicate label " + l.name;
        return false;
      }
    }
  }
  return true;
}

bool valid_histogram(const std::vector<double>& bounds, const std::vector<std::uint64_t>& counts, double sum,
                     bool summary) {
  if (!std::isfinite(sum) || counts.size() != bounds.size() + 1 || (summary && !bounds.empty())) return false;
  for (std::size_t i = 0; i < bounds.size(); ++i) {
    if (!std::isfinite(bounds[i]) || (i > 0 && bounds[i] <= bounds[i - 1])) return false;
  }
  return true;
}

boost::json::object counter_json(const std::string& family, const Labels& labels, double value,
                                 const std::string& help) {
  return boost::json::object{
      {"family", family}, {"labels", labels_json(labels)}, {"value", value}, {"help", help}};
}

boost::json::object histogram_json(const std::string& family, const Labels& labels,
                                   const std::vector<double>& bounds,
                                   const std::vector<std::uint64_t>& counts, double sum,
                                   const std::string& help, bool summary) {
  return boost::json::object{{"family", family},
                             {"labels", labels_json(labels)},
                             {"bounds", boost::json::array(bounds.begin(), bounds.end())},
                             {"counts", boost::json::array(counts.begin(), counts.end())},
                             {"sum", sum},
                             {"help", help},
                             {"summary", summary}};
}

// One counter or histogram entry of a state file, or nullopt with `why` when it must not be served (the
// file is input like any segment: a forged family name with a newline must not reach /metrics). A
// malformed document throws (boost::json accessors), which refuses the whole file.
std::optional<CumulativeTotals::Counter> parse_counter(const boost::json::object& o, std::string& why) {
  CumulativeTotals::Counter c;
  c.value = o.at("value").to_number<double>();
  if (const auto* help = o.if_contains("help")) c.help = std::string(help->as_string());
  c.family = std::string(o.at("family").as_string());
  c.labels = std::make_shared<const Labels>(labels_from(o.at("labels").as_array()));
  if (!valid_series(c.family, *c.labels, why)) return std::nullopt;
  if (!std::isfinite(c.value) || c.value < 0 || !shm::is_valid_utf8(c.help)) {
    why = "value not a finite non-negative number, or help not UTF-8";
    return std::nullopt;
  }
  return c;
}

std::optional<CumulativeTotals::Histogram> parse_histogram(const boost::json::object& o, std::string& why) {
  CumulativeTotals::Histogram h;
  for (const auto& b : o.at("bounds").as_array()) h.bounds.push_back(b.to_number<double>());
  for (const auto& n : o.at("counts").as_array()) h.counts.push_back(n.to_number<std::uint64_t>());
  h.sum = o.at("sum").to_number<double>();
  if (const auto* help = o.if_contains("help")) h.help = std::string(help->as_string());
  if (const auto* summary = o.if_contains("summary")) h.summary = summary->as_bool();
  h.family = std::string(o.at("family").as_string());
  h.labels = std::make_shared<const Labels>(labels_from(o.at("labels").as_array()));
  if (!valid_series(h.family, *h.labels, why)) return std::nullopt;
  if (!valid_histogram(h.bounds, h.counts, h.sum, h.summary) || !shm::is_valid_utf8(h.help)) {
    why = "bounds not finite and increasing, bucket count mismatch, or sum not finite";
    return std::nullopt;
  }
  return h;
}

// JSON text of `text`, which must be valid UTF-8.
void append_json_string(std::string& out, std::string_view text) {
  out.push_back('"');
  for (const char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == '"' || c == '\\') {
      out.push_back('\\');
      out.push_back(ch);
    } else if (c < 0x20) {
      char escaped[8];
      std::snprintf(escaped, sizeof escaped, "\\u%04x", static_cast<unsigned>(c));
      out.append(escaped);
    } else {
      out.push_back(ch);
    }
  }
  out.push_back('"');
}

// Shortest round-trip form; a floating-point `value` must be finite.
template <typename Number>
void append_json_number(std::string& out, Number value) {
  char digits[32];
  const auto end = std::to_chars(digits, digits + sizeof digits, value).ptr;
  out.append(digits, end);
}

// A label set as the checkpoint writes it; empty when a name or value is not UTF-8.
std::string checkpoint_labels_text(const Labels& labels) {
  std::string json = "[";
  for (std::size_t i = 0; i < labels.size(); ++i) {
    if (!shm::is_valid_utf8(labels[i].name) || !shm::is_valid_utf8(labels[i].value)) return {};
    json.append(i == 0 ? "[" : ",[");
    append_json_string(json, labels[i].name);
    json.push_back(',');
    append_json_string(json, labels[i].value);
    json.push_back(']');
  }
  json.push_back(']');
  return json;
}

}  // namespace

// The "types" table of the checkpoint, kept across checkpoints: a type keeps its index, so a series kept
// from one checkpoint to the next (SegmentRegistry keeps them) finds it through its TypeMemo without a
// lookup by content. Entries no longer used are written too (the reader ignores them) until the table
// is started over under a new epoch, when it holds many more types than a checkpoint uses.
struct RetiredTotals::CheckpointTypes {
  struct Key {
    std::string family;
    std::string help;
    int kind = 0;
    std::vector<double> bounds;
  };
  struct View {
    std::string_view family;
    std::string_view help;
    int kind = 0;
    std::span<const double> bounds;
  };
  struct Less {
    using is_transparent = void;
    static View view(const Key& k) { return {k.family, k.help, k.kind, k.bounds}; }
    static const View& view(const View& v) { return v; }
    template <typename A, typename B>
    bool operator()(const A& a, const B& b) const {
      const View& x = view(a);
      const View& y = view(b);
      if (x.family != y.family) return x.family < y.family;
      if (x.help != y.help) return x.help < y.help;
      if (x.kind != y.kind) return x.kind < y.kind;
      return std::lexicographical_compare(x.bounds.begin(), x.bounds.end(), y.bounds.begin(), y.bounds.end());
    }
  };
  static std::uint64_t next_epoch() {
    static std::uint64_t epochs = 0;  // io thread only, like everything here
    return ++epochs;
  }
  std::uint64_t epoch = next_epoch();
  std::map<Key, std::size_t, Less> index;
  std::string text;
  std::size_t count = 0;
  // Per index: the last checkpoint that used it; a checkpoint's number.
  std::vector<std::uint64_t> used_in;
  std::uint64_t checkpoint = 0;
  std::size_t used_last = 0;  // distinct types the previous checkpoint used
  // The "label_sets" table, the same way: by identity (CumulativeLabels keeps the same objects from one
  // checkpoint to the next); holding the labels keeps their address from being reused by others.
  struct LabelEntry {
    std::shared_ptr<const Labels> labels;
    std::size_t index = 0;
  };
  std::unordered_map<const Labels*, LabelEntry> label_index;
  std::string label_text;
  std::size_t label_count = 0;
  std::vector<std::uint64_t> label_used_in;
  std::size_t labels_used_last = 0;

  // Before a checkpoint is written: starts both tables over when most of one is unused.
  void begin() {
    if (count > 2 * used_last + 256 || label_count > 2 * labels_used_last + 256) {
      index.clear();
      text.clear();
      count = 0;
      used_in.clear();
      label_index.clear();
      label_text.clear();
      label_count = 0;
      label_used_in.clear();
      epoch = next_epoch();
    }
    ++checkpoint;
    used_last = 0;
    labels_used_last = 0;
  }
  std::size_t find_labels(const std::shared_ptr<const Labels>& labels, CumulativeTotals::TypeMemo& memo,
                          std::size_t refused) {
    if (memo.epoch != epoch) {
      auto [it, inserted] = label_index.try_emplace(labels.get());
      if (inserted) {
        it->second.labels = labels;
        const std::string json = checkpoint_labels_text(*labels);
        if (json.empty()) {
          it->second.index = refused;
        } else {
          it->second.index = label_count++;
          if (it->second.index != 0) label_text.push_back(',');
          label_text.append(json);
          label_used_in.push_back(0);
        }
      }
      memo = {epoch, it->second.index};
    }
    if (memo.index != refused && label_used_in[memo.index] != checkpoint) {
      label_used_in[memo.index] = checkpoint;
      ++labels_used_last;
    }
    return memo.index;
  }
  std::size_t find(std::string_view family, std::string_view help, int kind, std::span<const double> bounds,
                   CumulativeTotals::TypeMemo& memo, std::size_t refused) {
    std::size_t at = memo.index;
    if (memo.epoch != epoch) {
      auto it = index.find(View{family, help, kind, bounds});
      if (it == index.end()) {
        at = refused;
        const bool finite =
            std::all_of(bounds.begin(), bounds.end(), [](double b) { return std::isfinite(b); });
        if (finite && shm::is_valid_utf8(family) && shm::is_valid_utf8(help)) {
          at = count++;
          text.append(at == 0 ? "[" : ",[");
          append_json_string(text, family);
          text.push_back(',');
          append_json_string(text, help);
          text.push_back(',');
          append_json_number(text, kind);
          text.append(",[");
          for (std::size_t i = 0; i < bounds.size(); ++i) {
            if (i != 0) text.push_back(',');
            append_json_number(text, bounds[i]);
          }
          text.append("]]");
          used_in.push_back(0);
        }
        it = index
                 .emplace(Key{std::string(family), std::string(help), kind, {bounds.begin(), bounds.end()}},
                          at)
                 .first;
      }
      at = it->second;
      memo = {epoch, at};
    }
    if (at != refused && used_in[at] != checkpoint) {
      used_in[at] = checkpoint;
      ++used_last;
    }
    return at;
  }
};

namespace {

// The "types" and "label_sets" tables of a checkpoint: each series type (family, help, kind, bounds) and
// each label set is written once and referred to by its index.
class CheckpointTables {
 public:
  static constexpr std::size_t kRefused = static_cast<std::size_t>(-1);  // not UTF-8 or not finite

  // `written`: the label sets the previous checkpoint wrote; replaced by those this one writes (finish).
  CheckpointTables(RetiredTotals::WrittenLabelSets& written, RetiredTotals::CheckpointTypes* types)
      : written_(written), persistent_types_(types) {
    if (persistent_types_ != nullptr) persistent_types_->begin();
  }

  // kind: 0 counter, 1 histogram, 2 summary.
  std::size_t type(std::string_view family, std::string_view help, int kind, std::span<const double> bounds,
                   CumulativeTotals::TypeMemo& memo) {
    if (persistent_types_ != nullptr)
      return persistent_types_->find(family, help, kind, bounds, memo, kRefused);
    return type(family, help, kind, bounds);
  }
  std::size_t label_set(const std::shared_ptr<const Labels>& labels, CumulativeTotals::TypeMemo& memo) {
    if (persistent_types_ != nullptr) return persistent_types_->find_labels(labels, memo, kRefused);
    return label_set(labels);
  }
  std::size_t type(std::string_view family, std::string_view help, int kind, std::span<const double> bounds) {
    auto [it, inserted] = types_index_.try_emplace(Type{family, help, kind, bounds}, kRefused);
    if (!inserted) return it->second;
    const bool finite = std::all_of(bounds.begin(), bounds.end(), [](double b) { return std::isfinite(b); });
    if (!finite || !shm::is_valid_utf8(family) || !shm::is_valid_utf8(help)) return kRefused;
    it->second = types_count_++;
    types_.append(it->second == 0 ? "[" : ",[");
    append_json_string(types_, family);
    types_.push_back(',');
    append_json_string(types_, help);
    types_.push_back(',');
    append_json_number(types_, kind);
    types_.append(",[");
    for (std::size_t i = 0; i < bounds.size(); ++i) {
      if (i != 0) types_.push_back(',');
      append_json_number(types_, bounds[i]);
    }
    types_.append("]]");
    return it->second;
  }

  // By identity, not by content (CumulativeLabels keeps the same objects from one checkpoint to the next):
  // each label set is escaped and checked once while it is written.
  std::size_t label_set(const std::shared_ptr<const Labels>& labels) {
    auto [it, inserted] = label_sets_index_.try_emplace(labels.get(), kRefused);
    if (!inserted) return it->second;
    RetiredTotals::WrittenLabels& text = next_[labels.get()];
    if (auto before = written_.find(labels.get()); before != written_.end()) {
      text = std::move(before->second);  // the same object as last time: the same text
    } else {
      text.labels = labels;
      text.json = labels_text(*labels);
    }
    if (text.json.empty()) return kRefused;
    it->second = label_sets_count_++;
    if (it->second != 0) label_sets_.push_back(',');
    label_sets_.append(text.json);
    return it->second;
  }

  void finish(std::string& out) {
    out.append(",\"types\":[")
        .append(persistent_types_ != nullptr ? persistent_types_->text : types_)
        .append("],\"label_sets\":[")
        .append(persistent_types_ != nullptr ? persistent_types_->label_text : label_sets_)
        .push_back(']');
    written_ = std::move(next_);
  }

 private:
  struct Type {
    std::string_view family;
    std::string_view help;
    int kind = 0;
    std::span<const double> bounds;
    bool operator<(const Type& o) const {
      if (family != o.family) return family < o.family;
      if (help != o.help) return help < o.help;
      if (kind != o.kind) return kind < o.kind;
      return std::lexicographical_compare(bounds.begin(), bounds.end(), o.bounds.begin(), o.bounds.end());
    }
  };
  static std::string labels_text(const Labels& labels) { return checkpoint_labels_text(labels); }

  RetiredTotals::WrittenLabelSets& written_;
  RetiredTotals::CheckpointTypes* persistent_types_;  // null: a table of this checkpoint only
  RetiredTotals::WrittenLabelSets next_;
  // Keys view the checkpoints being written, which outlive the tables.
  std::map<Type, std::size_t> types_index_;
  std::unordered_map<const Labels*, std::size_t> label_sets_index_;
  std::size_t types_count_ = 0;
  std::size_t label_sets_count_ = 0;
  std::string types_;
  std::string label_sets_;
};

// The checkpoint file, written as text directly: it is rewritten before every scrape, and a JSON tree of
// every value first would cost about as much as rendering the exposition. A generation's entry holds
// little more than its values (CheckpointTables):
//   {"version": 1,
//    "generations": [{"segment": name, "generation": "<nonce>",
//                     "gauges": [{"key", "integral", "value", "until_ns": "<n>"}, ...],
//                     "counters": [[type, label set, value], ...],
//                     "histograms": [[type, label set, sum, [counts]], ...]}, ...],
//    "types": [[family, help, kind, [bounds]], ...],
//    "label_sets": [[[name, value], ...], ...]}
// Only what the reader accepts is written: a non-finite number or a string that is not UTF-8 (neither is
// JSON) leaves its entry out rather than making the whole file unreadable.
class CheckpointWriter {
 public:
  CheckpointWriter(std::string& out, RetiredTotals::WrittenLabelSets& written,
                   RetiredTotals::CheckpointTypes* types = nullptr)
      : out_(out), tables_(written, types) {
    out_.clear();
    out_.append("{\"version\":").append(std::to_string(kStateVersion)).append(",\"generations\":[");
  }

  void generation(const RetiredTotals::GenerationKey& key, const RetiredTotals::LiveCheckpoint& checkpoint) {
    if (!shm::is_valid_utf8(key.first)) return;
    if (generations_++ != 0) out_.push_back(',');
    out_.append("{\"segment\":");
    append_json_string(out_, key.first);
    out_.append(R"(,"generation":")").append(std::to_string(key.second)).append(R"(","gauges":[)");
    bool first = true;
    for (const auto& [name, c] : checkpoint.integrals) {
      if (!std::isfinite(c.integral) || !std::isfinite(c.value) || !shm::is_valid_utf8(name)) continue;
      out_.append(std::exchange(first, false) ? "{\"key\":" : ",{\"key\":");
      append_json_string(out_, name);
      out_.append(",\"integral\":");
      append_json_number(out_, c.integral);
      out_.append(",\"value\":");
      append_json_number(out_, c.value);
      out_.append(R"(,"until_ns":")").append(std::to_string(c.until_ns)).append(R"("})");
    }
    out_.push_back(']');
    if (checkpoint.totals.has_value()) totals(*checkpoint.totals);
    out_.push_back('}');
  }

  void finish() {
    out_.push_back(']');
    tables_.finish(out_);
    out_.append("}\n");
  }

 private:
  void totals(const CumulativeTotals& totals) {
    out_.append(",\"counters\":[");
    bool first = true;
    totals.counter_types.resize(totals.counters.size());
    totals.counter_labels.resize(totals.counters.size());
    for (std::size_t i = 0; i < totals.counters.size(); ++i) {
      const CumulativeTotals::Counter& c = totals.counters[i];
      const std::size_t t = tables_.type(c.family, c.help, 0, {}, totals.counter_types[i]);
      const std::size_t l = tables_.label_set(c.labels, totals.counter_labels[i]);
      if (t == CheckpointTables::kRefused || l == CheckpointTables::kRefused || !std::isfinite(c.value))
        continue;
      out_.append(std::exchange(first, false) ? "[" : ",[");
      entry_head(t, l);
      append_json_number(out_, c.value);
      out_.push_back(']');
    }
    out_.append("],\"histograms\":[");
    first = true;
    totals.histogram_types.resize(totals.histograms.size());
    totals.histogram_labels.resize(totals.histograms.size());
    for (std::size_t j = 0; j < totals.histograms.size(); ++j) {
      const CumulativeTotals::Histogram& h = totals.histograms[j];
      const std::size_t t =
          tables_.type(h.family, h.help, h.summary ? 2 : 1, h.bounds, totals.histogram_types[j]);
      const std::size_t l = tables_.label_set(h.labels, totals.histogram_labels[j]);
      if (t == CheckpointTables::kRefused || l == CheckpointTables::kRefused || !std::isfinite(h.sum))
        continue;
      out_.append(std::exchange(first, false) ? "[" : ",[");
      entry_head(t, l);
      append_json_number(out_, h.sum);
      out_.append(",[");
      for (std::size_t i = 0; i < h.counts.size(); ++i) {
        if (i != 0) out_.push_back(',');
        append_json_number(out_, h.counts[i]);
      }
      out_.append("]]");
    }
    out_.push_back(']');
  }
  void entry_head(std::size_t type, std::size_t label_set) {
    append_json_number(out_, type);
    out_.push_back(',');
    append_json_number(out_, label_set);
    out_.push_back(',');
  }

  std::string& out_;
  CheckpointTables tables_;
  std::size_t generations_ = 0;
};

// Reads the totals CheckpointWriter wrote. A malformed document throws (boost::json accessors, out-of-range
// indices), which refuses the whole file; a series that must not be served is dropped and counted in
// `dropped` (`why`: the first reason), as an entry of the retired totals would be.
class TotalsDecoder {
 public:
  explicit TotalsDecoder(const boost::json::object& doc) {
    if (const auto* types = doc.if_contains("types")) {
      for (const auto& t : types->as_array()) {
        const auto& a = t.as_array();
        Type type;
        type.family = std::string(a.at(0).as_string());
        type.help = std::string(a.at(1).as_string());
        type.kind = a.at(2).to_number<int>();
        for (const auto& b : a.at(3).as_array()) type.bounds.push_back(b.to_number<double>());
        types_.push_back(std::move(type));
      }
    }
    if (const auto* sets = doc.if_contains("label_sets")) {
      for (const auto& l : sets->as_array())
        label_sets_.push_back(std::make_shared<const Labels>(labels_from(l.as_array())));
    }
  }
  CumulativeTotals totals(const boost::json::object& generation, std::uint64_t& dropped,
                          std::string& why) const {
    CumulativeTotals out;
    for (const auto& entry : generation.at("counters").as_array()) {
      const auto& a = entry.as_array();
      const Type& type = types_.at(a.at(0).to_number<std::size_t>());
      CumulativeTotals::Counter c{type.family, type.help, label_sets_.at(a.at(1).to_number<std::size_t>()),
                                  a.at(2).to_number<double>()};
      std::string reason;
      if (type.kind != 0 || !valid_series(c.family, *c.labels, reason) || !std::isfinite(c.value) ||
          c.value < 0 || !shm::is_valid_utf8(c.help)) {
        if (dropped++ == 0)
          why = reason.empty() ? "not a finite non-negative counter, or help not UTF-8" : reason;
        continue;
      }
      out.counters.push_back(std::move(c));
    }
    for (const auto& entry : generation.at("histograms").as_array()) {
      const auto& a = entry.as_array();
      const Type& type = types_.at(a.at(0).to_number<std::size_t>());
      CumulativeTotals::Histogram h;
      h.family = type.family;
      h.help = type.help;
      h.labels = label_sets_.at(a.at(1).to_number<std::size_t>());
      h.sum = a.at(2).to_number<double>();
      for (const auto& n : a.at(3).as_array()) h.counts.push_back(n.to_number<std::uint64_t>());
      h.bounds = type.bounds;
      h.summary = type.kind == 2;
      std::string reason;
      if ((type.kind != 1 && type.kind != 2) || !valid_series(h.family, *h.labels, reason) ||
          !valid_histogram(h.bounds, h.counts, h.sum, h.summary) || !shm::is_valid_utf8(h.help)) {
        if (dropped++ == 0) {
          why = reason.empty() ? "bounds not finite and increasing, bucket count mismatch, or sum not finite"
                               : reason;
        }
        continue;
      }
      out.histograms.push_back(std::move(h));
    }
    return out;
  }

 private:
  struct Type {
    std::string family;
    std::string help;
    int kind = 0;
    std::vector<double> bounds;
  };
  std::vector<Type> types_;
  std::vector<std::shared_ptr<const Labels>> label_sets_;
};

bool write_all(int fd, const std::string& data) {
  std::size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    done += static_cast<std::size_t>(n);
  }
  return true;
}

// Replaces `path` by a file holding `text`: an exclusive temporary of a random name (O_EXCL |
// O_NOFOLLOW), written, fsynced when `durable`, renamed over `path`; nothing planted in the directory is
// opened or truncated, and rename() replaces the name itself (a symlink there included).
bool replace_file(const std::string& path, const std::string& text, bool durable, std::string& error) {
  std::random_device entropy;
  char suffix[32];
  std::snprintf(suffix, sizeof suffix, ".tmp.%d.%08x", static_cast<int>(getpid()), entropy());
  const std::string temporary = path + suffix;
  const int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0640);
  if (fd < 0) {
    error = "cannot write " + temporary + ": " + shm::errno_text(errno);
    return false;
  }
  const bool ok = write_all(fd, text) && (!durable || ::fsync(fd) == 0);
  const int saved_errno = errno;
  ::close(fd);
  if (!ok || ::rename(temporary.c_str(), path.c_str()) != 0) {
    error = "cannot write " + path + ": " + shm::errno_text(ok ? errno : saved_errno);
    ::unlink(temporary.c_str());
    return false;
  }
  return true;
}

// The whole of a regular file, never through a symlink and never blocking on a FIFO; nullopt with
// errno set (ENOENT: absent) if it cannot be read.
std::optional<std::string> read_state_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0) return std::nullopt;
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    errno = EINVAL;
    return std::nullopt;
  }
  std::string text;
  char buffer[65536];
  for (;;) {
    const ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    text.append(buffer, static_cast<std::size_t>(n));
  }
  ::close(fd);
  return text;
}

}  // namespace

RetiredTotals::RetiredTotals(std::string state_dir) : dir_(std::move(state_dir)) {
  if (!dir_.empty()) {
    path_ = dir_ + "/retired-totals.json";
    checkpoint_path_ = dir_ + "/integrals.json";
  }
}

RetiredTotals::Checkpoints RetiredTotals::take_checkpoints(const GenerationKey& generation) {
  auto it = unclaimed_checkpoints_.find(generation);
  if (it == unclaimed_checkpoints_.end()) return {};
  Checkpoints out = std::move(it->second.integrals);
  unclaimed_checkpoints_.erase(it);
  return out;
}

std::vector<RetiredTotals::GenerationKey> RetiredTotals::unclaimed_totals() const {
  std::vector<GenerationKey> out;
  for (const auto& [key, checkpoint] : unclaimed_checkpoints_) {
    if (checkpoint.totals.has_value()) out.push_back(key);
  }
  return out;
}

void RetiredTotals::fold_unclaimed(const GenerationKey& generation) {
  auto it = unclaimed_checkpoints_.find(generation);
  if (it != unclaimed_checkpoints_.end() && it->second.totals.has_value())
    fold(generation, *it->second.totals);
}

bool RetiredTotals::save_checkpoints(const std::map<GenerationKey, LiveCheckpoint>& live, bool drop_unclaimed,
                                     std::string& error) {
  std::map<GenerationKey, const LiveCheckpoint*> pointers;
  for (const auto& [key, checkpoint] : live) pointers.emplace(key, &checkpoint);
  return save_live_checkpoints(pointers, drop_unclaimed, error);
}

bool RetiredTotals::save_live_checkpoints(const std::map<GenerationKey, const LiveCheckpoint*>& live,
                                          bool drop_unclaimed, std::string& error) {
  if (checkpoint_path_.empty()) return true;
  if (drop_unclaimed) {
    std::erase_if(unclaimed_checkpoints_, [](const auto& entry) { return !entry.second.totals.has_value(); });
  }
  std::string text;
  text.reserve(last_checkpoint_text_.size() + last_checkpoint_text_.size() / 8);
  if (!checkpoint_types_) checkpoint_types_ = std::make_shared<CheckpointTypes>();
  CheckpointWriter writer(text, written_labels_, checkpoint_types_.get());
  for (const auto& [key, checkpoint] : live) {
    if (!checkpoint->integrals.empty() || checkpoint->totals.has_value()) writer.generation(key, *checkpoint);
  }
  for (const auto& [key, checkpoint] : unclaimed_checkpoints_) {
    if (live.count(key) == 0) writer.generation(key, checkpoint);
  }
  writer.finish();
  if (text == last_checkpoint_text_) return true;
  if (!replace_file(checkpoint_path_, text, /*durable=*/false, error)) return false;
  last_checkpoint_text_ = std::move(text);
  return true;
}

bool RetiredTotals::holds_nonce(std::uint64_t nonce) const {
  for (const auto& [name, n] : generations_) {
    if (n == nonce) return true;
  }
  return false;
}

bool RetiredTotals::check_directory(std::string& error) const {
  if (dir_.empty()) return true;
  struct stat st {};
  if (::lstat(dir_.c_str(), &st) != 0) {
    error = "--state.dir " + dir_ + ": " + shm::errno_text(errno);
    return false;
  }
  if (!S_ISDIR(st.st_mode)) {
    error = "--state.dir " + dir_ + " is not a directory (a symlink is not accepted either)";
    return false;
  }
  // Whoever may write the directory may plant a symlink or a forged state file in it.
  if (st.st_uid != geteuid() && st.st_uid != 0) {
    error = "--state.dir " + dir_ + " is owned by uid " + std::to_string(st.st_uid) +
            ", neither this daemon's user (uid " + std::to_string(geteuid()) + ") nor root; refusing it";
    return false;
  }
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
    error = "--state.dir " + dir_ + " has mode " + mode +
            ": writable by group or others, who could plant or forge its state file; chmod go-w it";
    return false;
  }
  return true;
}

bool RetiredTotals::load(std::string& error) {
  if (path_.empty()) return true;
  const bool loaded = load_totals(error);
  rebuild_declarations();
  load_checkpoints();
  return loaded;
}

bool RetiredTotals::load_totals(std::string& error) {
  // A symlink or FIFO planted at the state file's name is neither followed nor able to block the start.
  const std::optional<std::string> read = read_state_file(path_);
  if (!read) {
    if (errno == ENOENT) return true;  // first start
    if (errno == EINVAL) {
      error = path_ + " is not a regular file; starting without retired totals";
    } else {
      error = path_ + " cannot be read (" + shm::errno_text(errno) +
              (errno == ELOOP ? "; a symlink is never followed" : "") + "); starting without retired totals";
    }
    return false;
  }
  const std::string& text = *read;
  std::uint64_t dropped = 0;
  std::string first_reason;
  auto drop = [&](const std::string& family, const std::string& why) {
    if (dropped++ == 0) first_reason = "family '" + family + "': " + why;
  };
  try {
    const boost::json::object doc = boost::json::parse(text).as_object();
    if (doc.at("version").as_int64() != kStateVersion) {
      error = path_ + ": unknown state version " + boost::json::serialize(doc.at("version"));
      return false;
    }
    for (const auto& g : doc.at("generations").as_array()) {
      const auto& a = g.as_array();
      generations_.insert({std::string(a.at(0).as_string()), std::stoull(std::string(a.at(1).as_string()))});
    }
    for (const auto& c : doc.at("counters").as_array()) {
      std::string why;
      auto counter = parse_counter(c.as_object(), why);
      if (!counter) {
        drop(std::string(c.as_object().at("family").as_string()), why);
        continue;
      }
      counters_[{std::move(counter->family), *counter->labels}] =
          Counter{counter->value, std::move(counter->help)};
    }
    for (const auto& h : doc.at("histograms").as_array()) {
      std::string why;
      auto histogram = parse_histogram(h.as_object(), why);
      if (!histogram) {
        drop(std::string(h.as_object().at("family").as_string()), why);
        continue;
      }
      histograms_[{std::move(histogram->family), *histogram->labels}] =
          Histogram{std::move(histogram->bounds), std::move(histogram->counts), histogram->sum,
                    std::move(histogram->help), histogram->summary};
    }
  } catch (const std::exception& e) {
    generations_.clear();
    counters_.clear();
    histograms_.clear();
    error = path_ + " is not a valid state file (" + e.what() + "); starting without retired totals";
    return false;
  }
  invalid_entries_ += dropped;
  if (dropped != 0) {
    spdlog::error("{}: dropped {} invalid entries (never served), the first: {}", path_, dropped,
                  first_reason);
  }
  return true;
}

void RetiredTotals::load_checkpoints() {
  // A missing or unreadable file starts the integrals of live generations at 0 (Prometheus reads that as
  // one counter reset) and recovers no generation that ended while no daemon ran; it never stops the
  // daemon.
  const auto text = read_state_file(checkpoint_path_);
  if (!text) {
    if (errno != ENOENT) spdlog::warn("{} cannot be read; live integrals start at 0", checkpoint_path_);
    return;
  }
  std::uint64_t dropped = 0;
  std::string first_reason;
  try {
    const boost::json::object doc = boost::json::parse(*text).as_object();
    if (doc.at("version").as_int64() != kStateVersion) throw std::runtime_error("unknown version");
    const TotalsDecoder decoder(doc);
    for (const auto& g : doc.at("generations").as_array()) {
      const auto& o = g.as_object();
      const GenerationKey key{std::string(o.at("segment").as_string()),
                              std::stoull(std::string(o.at("generation").as_string()))};
      LiveCheckpoint& checkpoint = unclaimed_checkpoints_[key];
      for (const auto& e : o.at("gauges").as_array()) {
        const auto& entry = e.as_object();
        IntegralCheckpoint c;
        c.integral = entry.at("integral").to_number<double>();
        c.value = entry.at("value").to_number<double>();
        c.until_ns = std::stoull(std::string(entry.at("until_ns").as_string()));
        // Forged or damaged numbers are refused here; GaugeTrack::restore refuses them again.
        if (!std::isfinite(c.integral) || c.integral < 0 || !std::isfinite(c.value)) continue;
        checkpoint.integrals[std::string(entry.at("key").as_string())] = c;
      }
      if (o.contains("counters") && o.contains("histograms"))
        checkpoint.totals = decoder.totals(o, dropped, first_reason);
    }
  } catch (const std::exception& e) {
    unclaimed_checkpoints_.clear();
    spdlog::warn("{} is not a valid checkpoint ({}); live integrals start at 0", checkpoint_path_, e.what());
    return;
  }
  invalid_entries_ += dropped;
  if (dropped != 0) {
    spdlog::error("{}: dropped {} invalid entries (never served), the first: {}", checkpoint_path_, dropped,
                  first_reason);
  }
  // Written before the retired totals that hold it were known to be saved (a daemon stopped between the
  // two writes): the totals have it already.
  std::erase_if(unclaimed_checkpoints_,
                [&](const auto& entry) { return holds(entry.first) || holds_nonce(entry.first.second); });
}

bool RetiredTotals::save(std::string& error) {
  if (path_.empty()) {
    unsaved_.clear();  // memory is all there is
    return true;
  }
  boost::json::object doc;
  doc["version"] = kStateVersion;
  boost::json::array generations;
  for (const auto& [name, nonce] : generations_) {
    generations.push_back(
        boost::json::array{boost::json::string(name), boost::json::string(std::to_string(nonce))});
  }
  doc["generations"] = std::move(generations);
  boost::json::array counters;
  for (const auto& [key, c] : counters_)
    counters.push_back(counter_json(key.first, key.second, c.value, c.help));
  doc["counters"] = std::move(counters);
  boost::json::array histograms;
  for (const auto& [key, h] : histograms_) {
    histograms.push_back(histogram_json(key.first, key.second, h.bounds, h.counts, h.sum, h.help, h.summary));
  }
  doc["histograms"] = std::move(histograms);
  const std::string text = boost::json::serialize(doc) + "\n";
  if (!replace_file(path_, text, /*durable=*/true, error)) return false;
  // The rename must reach the disk before the segment it accounts for is unlinked.
  const std::string dir = path_.substr(0, path_.rfind('/'));
  if (const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC); dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
  unsaved_.clear();
  return true;
}

void RetiredTotals::mark_retired(const GenerationKey& generation) {
  if (generations_.insert(generation).second) unsaved_.insert(generation);
}

void RetiredTotals::fold(const GenerationKey& generation, const CumulativeTotals& totals) {
  if (holds(generation)) return;
  // One declaration per family: the first series of each family in `totals` says which (the caller's
  // series of one family share it, SegmentRegistry::resolve_declarations).
  std::set<std::string_view> seen;
  for (const auto& c : totals.counters) {
    if (seen.insert(c.family).second) adopt_declaration(generation, c.family, {});
  }
  for (const auto& h : totals.histograms) {
    if (!seen.insert(h.family).second) continue;
    FamilyDeclaration d;
    d.kind = h.summary ? shm::SeriesKind::kSummary : shm::SeriesKind::kHistogram;
    if (!h.summary) d.bounds = h.bounds;
    adopt_declaration(generation, h.family, d);
  }
  for (const auto& c : totals.counters) add_counter(generation, c.family, *c.labels, c.value, c.help);
  for (const auto& h : totals.histograms)
    add_histogram(generation, h.family, *h.labels, h.bounds, h.counts, h.sum, h.help, h.summary);
  mark_retired(generation);
}

void RetiredTotals::adopt_declaration(const GenerationKey& generation, const std::string& family,
                                      const FamilyDeclaration& declaration) {
  auto [it, inserted] = declarations_.try_emplace(family, declaration);
  if (inserted) {
    ++declarations_version_;
    return;
  }
  if (it->second == declaration) return;
  // The generation folded now served this family with another declaration, so the retired series of
  // the old one were no longer served (SegmentRegistry left them out): dropping them takes nothing from
  // what a scrape showed, and keeps the family summable once the old declaration's generations are gone.
  ReplacedDeclaration replaced{family, it->second, declaration, generation, 0};
  const auto drop_family = [&](auto& series) {
    auto first = series.lower_bound(SeriesKey{family, {}});
    auto last = first;
    while (last != series.end() && last->first.first == family) {
      ++last;
      ++replaced.series_dropped;
    }
    series.erase(first, last);
  };
  drop_family(counters_);
  drop_family(histograms_);
  it->second = declaration;
  ++declarations_version_;
  replaced_.push_back(std::move(replaced));
}

void RetiredTotals::rebuild_declarations() {
  declarations_.clear();
  for (const auto& [key, c] : counters_) declarations_.try_emplace(key.first, FamilyDeclaration{});
  for (const auto& [key, h] : histograms_) {
    FamilyDeclaration d;
    d.kind = h.summary ? shm::SeriesKind::kSummary : shm::SeriesKind::kHistogram;
    if (!h.summary) d.bounds = h.bounds;
    declarations_.try_emplace(key.first, std::move(d));
  }
  ++declarations_version_;
}

void RetiredTotals::forget_generations_except(const std::set<GenerationKey>& still_present,
                                              const std::set<std::string>& unidentified) {
  for (auto it = generations_.begin(); it != generations_.end();) {
    const bool keep = still_present.count(*it) != 0 || unidentified.count(it->first) != 0;
    it = keep ? std::next(it) : generations_.erase(it);
  }
}

void RetiredTotals::add_counter(const GenerationKey& generation, const std::string& family,
                                const Labels& labels, double value, const std::string& help) {
  if (generations_.count(generation) != 0 || !std::isfinite(value)) return;
  if (declarations_.try_emplace(family, FamilyDeclaration{}).second) ++declarations_version_;
  Counter& c = counters_[{family, labels}];
  c.value += value;
  if (!help.empty()) c.help = help;
}

void RetiredTotals::add_histogram(const GenerationKey& generation, const std::string& family,
                                  const Labels& labels, const std::vector<double>& bounds,
                                  const std::vector<std::uint64_t>& counts, double sum,
                                  const std::string& help, bool summary) {
  if (generations_.count(generation) != 0 || counts.size() != bounds.size() + 1) return;
  auto [it, inserted] = histograms_.try_emplace({family, labels});
  Histogram& h = it->second;
  if (inserted) {
    h.bounds = bounds;
    h.counts.assign(counts.size(), 0);
    h.summary = summary;
    FamilyDeclaration d;
    d.kind = summary ? shm::SeriesKind::kSummary : shm::SeriesKind::kHistogram;
    if (!summary) d.bounds = bounds;
    if (declarations_.try_emplace(family, std::move(d)).second) ++declarations_version_;
  } else if (h.bounds != bounds || h.summary != summary) {
    return;  // the live aggregation counts this conflict; a retired total cannot merge it either
  }
  for (std::size_t i = 0; i < counts.size(); ++i) h.counts[i] += counts[i];
  h.sum += sum;
  if (!help.empty()) h.help = help;
}

void RetiredTotals::contribute(FamilySet& out, const std::set<std::string>& left_out) const {
  for (const auto& [key, c] : counters_) {
    if (!left_out.empty() && left_out.count(key.first) != 0) continue;
    out.add_counter(key.first, c.help, key.second, c.value);
  }
  for (const auto& [key, h] : histograms_) {
    if (!left_out.empty() && left_out.count(key.first) != 0) continue;
    out.add_histogram(key.first, h.help, key.second, h.bounds, h.counts, h.sum, {}, nullptr, 0, h.summary);
  }
}

}  // namespace rankstat
