// The family merge: FamilySet turns the samples every generation contributes into Prometheus metric
// families with prometheus_client's multiprocess semantics (docs/semantics.md):
//   counters and histograms  summed over every generation, dead ones included (never go backwards);
//   gauges                   by the family's mode: all / liveall (a pid label per process), sum, min,
//                            max, mostrecent and their live* forms, which ignore DEAD and CLOSED ranks.
// mostrecent picks the newest stamp (CLOCK_MONOTONIC: nanoseconds for a gauge set, the record's commit
// for a snapshot field); ties go to the newer generation, then to the lexicographically smaller segment
// name, never to directory order. Two gauge sets that one process ordered before the other never tie
// (their stamps differ by at least the time it took to signal), so the tie rule only picks between sets
// that nothing ordered.
// The merge is family_set.cpp; writing the merged families as text (render) is family_render.cpp; what
// each generation contributes is engine_collect.cpp and generation_contributions.hpp.
// Thread contract: a FamilySet is used by one thread at a time (the io thread's scrape cache owns it).
#pragma once

#include <prometheus/metric_family.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "engine_rules.hpp"
#include "label_policy.hpp"
#include "rank_segment.hpp"
#include "rankstat/shmproto/layout.hpp"
#include "text_exposition.hpp"

namespace rankstat {

// What every generation that exports a family must agree on for its series to be summed into one family:
// the type, a gauge's multiprocess mode, a histogram's bucket bounds. Generations that disagree are
// resolved per family by SegmentRegistry (the newest live declaration wins, docs/semantics.md); the other
// families of a losing generation are served as usual.
struct FamilyDeclaration {
  shm::SeriesKind kind = shm::SeriesKind::kCounter;
  shm::GaugeMode mode = shm::GaugeMode::kSum;  // a gauge's; kSum for the other kinds
  std::vector<double> bounds;                  // a histogram's, without +Inf; empty for the other kinds
  bool operator==(const FamilyDeclaration&) const = default;
  static FamilyDeclaration of(const shm::SeriesInfo& info);
  static FamilyDeclaration gauge(shm::GaugeMode mode) { return {shm::SeriesKind::kGauge, mode, {}}; }
};
// In words, for a log line: "counter", "gauge (multiprocess_mode livesum)", "histogram with buckets
// [0.1, 1.0, +Inf]", "summary".
std::string describe_declaration(const FamilyDeclaration& declaration);

// Who contributed a sample: decides live* membership, the pid label, mostrecent ties, and which engine
// instance owns a series (two instances never share one: see FamilySet::collisions()).
struct Contributor {
  bool live = true;
  std::uint32_t pid = 0;
  std::uint64_t created_ns = 0;
  std::string_view segment_name;
  std::string_view instance;  // empty: merges with any (retired totals)
};

// FamilySet's slots are keyed by (segment name, generation, instance label) and looked up by views of
// them. The comparator compares views on both sides: clang (clang-tidy) cannot compare a tuple of
// string_views with a tuple of strings through libstdc++ 12's operator<=>, g++ can.
using SegmentSlotKey = std::tuple<std::string, std::uint64_t, std::string>;
using SegmentSlotKeyView = std::tuple<std::string_view, std::uint64_t, std::string_view>;
struct SegmentSlotKeyLess {
  using is_transparent = void;
  static SegmentSlotKeyView view(const SegmentSlotKey& key) {
    return {std::get<0>(key), std::get<1>(key), std::get<2>(key)};
  }
  static const SegmentSlotKeyView& view(const SegmentSlotKeyView& key) { return key; }
  template <typename A, typename B>
  bool operator()(const A& a, const B& b) const {
    return view(a) < view(b);
  }
};

class FamilySet {
 private:
  struct Series;
  struct Family;

 public:
  // Where one contribution of a segment went in an earlier round (scrape) of this set. A valid slot
  // lets the next round skip building the contribution's labels and both map lookups; the rules applied
  // to the value are the same. Filled by the add_* calls that are given one.
  class Slot {
    friend class FamilySet;
    Family* family_ = nullptr;
    Series* series_ = nullptr;
    std::uint64_t layout_ = 0;
    std::uint64_t tag_ = 0;
  };
  // The slots of one segment generation, by what the caller contributes from it.
  struct SegmentSlots {
    std::vector<Slot> snapshot;
    std::vector<Slot> priorities;
    std::vector<Slot> routing;
    std::vector<Slot> cumulative;
    std::vector<Slot> integrals;  // three per integrated gauge: integral, window max, window min
    std::uint64_t round = 0;
  };
  // The slots of a generation (name and nonce) exported with `instance_label`; kept while it contributes.
  SegmentSlots& slots(std::string_view segment_name, std::uint64_t generation,
                      std::string_view instance_label);
  // True when `slot` still designates the series it was filled with for `tag`: the caller may then pass
  // empty labels and help (they are only used to fill a slot).
  bool slot_valid(const Slot& slot, std::uint64_t tag) const {
    return slot.series_ != nullptr && slot.layout_ == layout_ && slot.tag_ == tag;
  }

  void add_gauge(const std::string& name, std::string_view help, shm::GaugeMode mode, const Labels& labels,
                 double value, std::uint64_t timestamp_ns, const Contributor& from, Slot* slot = nullptr,
                 std::uint64_t tag = 0);
  void add_counter(const std::string& name, std::string_view help, const Labels& labels, double value,
                   const Contributor& from = {}, Slot* slot = nullptr, std::uint64_t tag = 0);
  void add_histogram(const std::string& name, std::string_view help, const Labels& labels,
                     const std::vector<double>& bounds, const std::vector<std::uint64_t>& counts, double sum,
                     const Contributor& from = {}, Slot* slot = nullptr, std::uint64_t tag = 0,
                     bool summary = false);  // summary: no bounds, counts = {count}

  // The families in name order, series in label order. The set is left empty.
  std::vector<prometheus::MetricFamily> finish();
  // Writes what finish() returns as text format 0.0.4, byte for byte as append_families(...,
  // Dialect::kPrometheusClient) writes it (text_exposition.hpp: prometheus_client's spelling), and ends
  // the round like finish(); but the set keeps every series'
  // storage and pre-rendered sample heads for the next round, so a scrape that finds the same series
  // only writes values. Series and families not contributed in a round are dropped at its end.
  // `family_ends` (optional) receives the offset in `out` where each written family ends.
  // Names that are not classic are written as `escaping` asks (text_exposition.hpp); the heads kept for
  // the next round are those of the last scheme, rebuilt when a series with such a name meets another.
  void render(std::string& out, std::vector<std::size_t>* family_ends = nullptr,
              exposition::Escaping escaping = exposition::Escaping::kUnderscores);
  // Samples dropped because their family's type, mode or buckets disagreed with an earlier rank's.
  std::uint64_t conflicts() const { return conflicts_; }
  // Samples dropped because another engine instance already owns the same name and label set
  // (two engines with the same model and rank numbers on one host: set --label.instance).
  std::uint64_t collisions() const { return collisions_; }
  // Samples dropped because their labels cannot be written correctly (invalid UTF-8, an invalid or
  // reserved name, a name twice, `le` on a histogram, `quantile` on a summary, `pid` on a per-process
  // gauge): typically a segment header's model_name, engine_type, instance or extra labels.
  std::uint64_t unexposable() const { return unexposable_; }

  // Operator-set constant labels (Config::constant_labels) added to every series from now on. Names are
  // checked at start (constant_label_refusal); a series that carries a label of the same name anyway
  // (an engine-declared label met at run time) keeps the engine's value: replacing it could merge two
  // of the engine's series into one. Changing them starts the set over (every slot is invalidated).
  void set_constant_labels(Labels labels);
  // Series contributed in this round whose own label shadowed a constant label of the same name.
  std::uint64_t shadowed_constant_labels() const { return shadowed_constant_labels_; }

 private:
  struct Series {
    Labels labels;
    std::uint64_t round = 0;  // the round that last contributed to it
    double value = 0;
    bool has_value = false;
    std::uint64_t timestamp_ns = 0;
    std::uint64_t created_ns = 0;
    std::string segment_name;
    std::string instance;
    bool shadows_constant_label = false;  // one of its own labels replaced a constant label
    std::vector<double> bounds;
    std::vector<std::uint64_t> counts;
    double sum = 0;
    // render(): the last exported counter value / histogram sum. Summing the same totals in another
    // order (a generation replaced or retired) can lower a fractional total by an ulp; Prometheus
    // would read that as a counter reset, so such a rounding step back is not exported.
    double exported_total = 0;
    double exported_sum = 0;
    // render(): the sample heads (name, labels, le), concatenated, for the type and bounds below.
    int head_type = -1;
    // The scheme the heads were written with, and whether they are the same under every scheme (the
    // family name and every label name classic).
    exposition::Escaping head_escaping = exposition::Escaping::kUnderscores;
    bool head_any_scheme = true;
    std::vector<double> head_bounds;
    std::string heads;
    std::vector<std::uint32_t> head_ends;
  };
  struct Family {
    prometheus::MetricType type = prometheus::MetricType::Untyped;
    shm::GaugeMode mode = shm::GaugeMode::kMostRecent;
    std::string help;
    std::map<std::string, Series> series;
    // render(): `series` in key order as a flat list, rebuilt only when a series was added or dropped;
    // walking the map node by node was a sixth of a 256-rank scrape (cache misses on tree links).
    std::vector<Series*> ordered;
    bool ordered_stale = true;
    std::uint64_t round = 0;
    const std::string* name = nullptr;  // the key in families_
  };
  Family* family_for(const std::string& name, std::string_view help, prometheus::MetricType type,
                     shm::GaugeMode mode);
  // First contribution to `f` in this round: (re)initialises it like a new family.
  Family* touch_family(Family& f, bool inserted, std::string_view help, prometheus::MetricType type,
                       shm::GaugeMode mode, bool keep_help);
  // The series for `labels`, or nullptr if another instance owns it. `pid_label` (if non-empty) is
  // appended as pid="...". `inserted` is true when the series is new in this round.
  Series* series_for(Family& family, const Labels& labels, std::string_view pid_label,
                     const Contributor& from, bool& inserted);
  Series* touch_series(Series& s, bool fresh, const Contributor& from, bool& inserted);
  // Resolves a contribution through `slot` when valid, else through the maps (filling the slot).
  Series* resolve(Slot* slot, std::uint64_t tag, const std::string& name, std::string_view help,
                  prometheus::MetricType type, shm::GaugeMode mode, const Labels& labels,
                  std::string_view pid_label, const Contributor& from, bool& inserted);
  // Which samples of a series to write: all of them, or a histogram's _sum only / its buckets and _count
  // only (prometheus_client's multiprocess order writes every _sum of a family before the buckets).
  enum class SeriesPart { kAll, kHistogramSum, kHistogramRest };
  void render_series(std::string& out, const std::string& name, prometheus::MetricType type, Series& s,
                     SeriesPart part, exposition::Escaping escaping);

  std::map<std::string, Family> families_;
  std::uint64_t conflicts_ = 0;
  std::uint64_t collisions_ = 0;
  std::uint64_t unexposable_ = 0;
  std::uint64_t shadowed_constant_labels_ = 0;
  Labels constant_labels_;    // sorted by name
  std::uint64_t round_ = 1;   // rounds end at finish() or render()
  std::uint64_t layout_ = 1;  // changes whenever a series or family is erased: invalidates every slot
  std::string key_scratch_;
  Labels sorted_scratch_;
  std::map<SegmentSlotKey, SegmentSlots, SegmentSlotKeyLess> slots_;
};

}  // namespace rankstat
