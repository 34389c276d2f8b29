#include "checkpoint_file.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <boost/json/parse.hpp>
#include <cerrno>
#include <cmath>
#include <span>
#include <stdexcept>
#include <string_view>

#include "rankstat/shmproto/cumulative.hpp"
#include "state_json.hpp"

namespace rankstat {
namespace {

using state_file::append_json_number;
using state_file::append_json_string;
using state_file::append_json_total;
using state_file::kStateVersion;
using state_file::labels_from;
using state_file::labels_text;
using state_file::read_state_file;
using state_file::replace_file;
using state_file::total_from_json;
using state_file::valid_counter_total;
using state_file::valid_histogram;
using state_file::valid_series;

}  // namespace

// The "types" table of the checkpoint, kept across checkpoints: a type keeps its index, so a series kept
// from one checkpoint to the next (SegmentRegistry keeps them) finds it through its TypeMemo without a
// lookup by content. Entries no longer used are written too (the reader ignores them) until the table
// is started over under a new epoch, when it holds many more types than a checkpoint uses.
struct CheckpointFile::Types {
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
        const std::string json = labels_text(*labels);
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
// each label set is written once and referred to by its index. The tables themselves are
// CheckpointFile::Types, kept from one checkpoint to the next; this is one checkpoint's use of them.
class CheckpointTables {
 public:
  static constexpr std::size_t kRefused = static_cast<std::size_t>(-1);  // not UTF-8 or not finite

  explicit CheckpointTables(CheckpointFile::Types& types) : types_(types) { types_.begin(); }

  // kind: 0 counter, 1 histogram, 2 summary.
  std::size_t type(std::string_view family, std::string_view help, int kind, std::span<const double> bounds,
                   CumulativeTotals::TypeMemo& memo) {
    return types_.find(family, help, kind, bounds, memo, kRefused);
  }
  std::size_t label_set(const std::shared_ptr<const Labels>& labels, CumulativeTotals::TypeMemo& memo) {
    return types_.find_labels(labels, memo, kRefused);
  }

  void finish(std::string& out) {
    out.append(",\"types\":[")
        .append(types_.text)
        .append("],\"label_sets\":[")
        .append(types_.label_text)
        .push_back(']');
  }

 private:
  CheckpointFile::Types& types_;
};

// The checkpoint file, written as text directly: it is rewritten before every scrape, and a JSON tree of
// every value first would cost about as much as rendering the exposition. A generation's entry holds
// little more than its values (CheckpointTables):
//   {"version": 1,
//    "generations": [{"segment": name, "generation": "<nonce>",
//                     "gauges": [{"key", "integral", "value", "until_ns": "<n>"}, ...],
//                     "counters": [[type, label set, value], ...],
//                     "histograms": [[type, label set, sum, [counts]], ...]}, ...],   (value, sum:
//                                                                                      total_json)
//    "types": [[family, help, kind, [bounds]], ...],
//    "label_sets": [[[name, value], ...], ...]}
// A counter value or histogram sum that is NaN or infinite is written as "NaN", "+Inf" or "-Inf"
// (total_json). Otherwise only what the reader accepts is written: a non-finite integral or bound, or a
// string that is not UTF-8 (JSON has neither), leaves its entry out rather than making the whole file
// unreadable.
class CheckpointWriter {
 public:
  CheckpointWriter(std::string& out, CheckpointFile::Types& types) : out_(out), tables_(types) {
    out_.clear();
    out_.append("{\"version\":").append(std::to_string(kStateVersion)).append(",\"generations\":[");
  }

  void generation(const GenerationKey& key, const LiveCheckpoint& checkpoint) {
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
      if (t == CheckpointTables::kRefused || l == CheckpointTables::kRefused) continue;
      out_.append(std::exchange(first, false) ? "[" : ",[");
      entry_head(t, l);
      append_json_total(out_, c.value);
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
      if (t == CheckpointTables::kRefused || l == CheckpointTables::kRefused) continue;
      out_.append(std::exchange(first, false) ? "[" : ",[");
      entry_head(t, l);
      append_json_total(out_, h.sum);
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
                                  total_from_json(a.at(2))};
      std::string reason;
      if (type.kind != 0 || !valid_series(c.family, *c.labels, reason) || !valid_counter_total(c.value) ||
          !shm::is_valid_utf8(c.help)) {
        if (dropped++ == 0) why = reason.empty() ? "a negative counter, or help not UTF-8" : reason;
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
      h.sum = total_from_json(a.at(2));
      for (const auto& n : a.at(3).as_array()) h.counts.push_back(n.to_number<std::uint64_t>());
      h.bounds = type.bounds;
      h.summary = type.kind == 2;
      std::string reason;
      if ((type.kind != 1 && type.kind != 2) || !valid_series(h.family, *h.labels, reason) ||
          !valid_histogram(h.bounds, h.counts, h.summary) || !shm::is_valid_utf8(h.help)) {
        if (dropped++ == 0) {
          why = reason.empty() ? "bounds not finite and increasing, or bucket count mismatch" : reason;
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

}  // namespace

IntegralCheckpoints CheckpointFile::take(const GenerationKey& generation) {
  auto it = unclaimed_.find(generation);
  if (it == unclaimed_.end()) return {};
  IntegralCheckpoints out = std::move(it->second.integrals);
  unclaimed_.erase(it);
  return out;
}

std::vector<GenerationKey> CheckpointFile::unclaimed_totals() const {
  std::vector<GenerationKey> out;
  for (const auto& [key, checkpoint] : unclaimed_) {
    if (checkpoint.totals.has_value()) out.push_back(key);
  }
  return out;
}

const CumulativeTotals* CheckpointFile::totals_of(const GenerationKey& generation) const {
  const auto it = unclaimed_.find(generation);
  return it != unclaimed_.end() && it->second.totals.has_value() ? &*it->second.totals : nullptr;
}

bool CheckpointFile::save(const std::map<GenerationKey, LiveCheckpoint>& live, bool drop_unclaimed,
                          std::string& error) {
  std::map<GenerationKey, const LiveCheckpoint*> pointers;
  for (const auto& [key, checkpoint] : live) pointers.emplace(key, &checkpoint);
  return save_live(pointers, drop_unclaimed, error);
}

bool CheckpointFile::save_live(const std::map<GenerationKey, const LiveCheckpoint*>& live,
                               bool drop_unclaimed, std::string& error) {
  if (path_.empty()) return true;
  if (drop_unclaimed) {
    std::erase_if(unclaimed_, [](const auto& entry) { return !entry.second.totals.has_value(); });
  }
  std::string text;
  text.reserve(last_text_.size() + last_text_.size() / 8);
  if (!types_) types_ = std::make_shared<Types>();
  CheckpointWriter writer(text, *types_);
  for (const auto& [key, checkpoint] : live) {
    if (!checkpoint->integrals.empty() || checkpoint->totals.has_value()) writer.generation(key, *checkpoint);
  }
  for (const auto& [key, checkpoint] : unclaimed_) {
    if (live.count(key) == 0) writer.generation(key, checkpoint);
  }
  writer.finish();
  if (text == last_text_) return true;
  if (!replace_file(path_, text, /*durable=*/false, error)) return false;
  last_text_ = std::move(text);
  return true;
}

void CheckpointFile::load(const std::function<bool(const GenerationKey&)>& retired, std::uint64_t& invalid) {
  // A missing or unreadable file starts the integrals of live generations at 0 (Prometheus reads that as
  // one counter reset) and recovers no generation that ended while no daemon ran; it never stops the
  // daemon.
  if (path_.empty()) return;
  const auto text = read_state_file(path_);
  if (!text) {
    if (errno != ENOENT) spdlog::warn("{} cannot be read; live integrals start at 0", path_);
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
      LiveCheckpoint& checkpoint = unclaimed_[key];
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
    unclaimed_.clear();
    spdlog::warn("{} is not a valid checkpoint ({}); live integrals start at 0", path_, e.what());
    return;
  }
  invalid += dropped;
  if (dropped != 0) {
    spdlog::error("{}: dropped {} invalid entries (never served), the first: {}", path_, dropped,
                  first_reason);
  }
  // Written before the retired totals that hold it were known to be saved (a daemon stopped between the
  // two writes): the totals have it already.
  std::erase_if(unclaimed_, [&](const auto& entry) { return retired(entry.first); });
}

}  // namespace rankstat
