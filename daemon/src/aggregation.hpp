// Turning every segment generation's state into Prometheus metric families with prometheus_client's
// multiprocess semantics (docs/semantics.md):
//   counters and histograms  summed over every generation, dead ones included (never go backwards);
//   gauges                   by the family's mode: all / liveall (a pid label per process), sum, min,
//                            max, mostrecent and their live* forms, which ignore DEAD and CLOSED ranks.
// mostrecent picks the newest record timestamp (CLOCK_MONOTONIC); ties go to the newer generation,
// then to the lexicographically smaller segment name, never to directory order.
#pragma once

#include <prometheus/metric_family.h>

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "rank_segment.hpp"
#include "rankstat/shmproto/layout.hpp"

namespace rankstat {

using Labels = std::vector<prometheus::ClientMetric::Label>;

// Who contributed a sample: decides live* membership, the pid label, mostrecent ties, and which engine
// instance owns a series (two instances never share one: see FamilySet::collisions()).
struct Contributor {
  bool live = true;
  std::uint32_t pid = 0;
  std::uint64_t created_ns = 0;
  std::string_view segment_name;
  std::string_view instance;  // empty: merges with any (retired totals)
};

class FamilySet {
 public:
  void add_gauge(const std::string& name, std::string_view help, shm::GaugeMode mode, const Labels& labels,
                 double value, std::uint64_t timestamp_ns, const Contributor& from);
  void add_counter(const std::string& name, std::string_view help, const Labels& labels, double value,
                   const Contributor& from = {});
  void add_histogram(const std::string& name, std::string_view help, const Labels& labels,
                     const std::vector<double>& bounds, const std::vector<std::uint64_t>& counts, double sum,
                     const Contributor& from = {});

  // The families in name order, series in label order. The set is left empty.
  std::vector<prometheus::MetricFamily> finish();
  // Samples dropped because their family's type, mode or buckets disagreed with an earlier rank's.
  std::uint64_t conflicts() const { return conflicts_; }
  // Samples dropped because another engine instance already owns the same name and label set
  // (two engines with the same model and rank numbers on one host: set --label.instance).
  std::uint64_t collisions() const { return collisions_; }

 private:
  struct Series {
    Labels labels;
    double value = 0;
    bool has_value = false;
    std::uint64_t timestamp_ns = 0;
    std::uint64_t created_ns = 0;
    std::string segment_name;
    std::string instance;
    std::vector<double> bounds;
    std::vector<std::uint64_t> counts;
    double sum = 0;
  };
  struct Family {
    prometheus::MetricType type = prometheus::MetricType::Untyped;
    shm::GaugeMode mode = shm::GaugeMode::kMostRecent;
    std::string help;
    std::map<std::string, Series> series;
  };
  Family* family_for(const std::string& name, std::string_view help, prometheus::MetricType type,
                     shm::GaugeMode mode);
  // The series for `labels`, or nullptr if another instance owns it.
  Series* series_for(Family& family, Labels labels, const Contributor& from, bool& inserted);

  std::map<std::string, Family> families_;
  std::uint64_t conflicts_ = 0;
  std::uint64_t collisions_ = 0;
};

// The identity labels of a segment, in SGLang's order: model_name, engine_type, tp_rank, pp_rank,
// moe_ep_rank, priority (empty, when priority scheduling is on), dp_rank (when set), extra labels,
// then `instance_label`="<instance id>" when an instance label is configured.
Labels identity_labels(const shm::SegmentHeader& identity, const std::string& instance_label = "");

// The labels a cumulative series is exported with: the identity labels (unless the series opts out),
// overridden or extended by the series' own labels.
Labels series_labels(const Labels& identity, const SeriesState& series);

struct CollectOptions {
  std::string instance_label;      // --label.instance; empty: none
  std::uint64_t now_ns = 0;
  std::uint64_t dead_grace_ns = 0;  // a dead generation's `all`-mode series are kept this long
};

// SGLang's engine-level rule: only the stats-logging rank (attn_tp_rank 0) exports scheduler metrics,
// unless all-schedulers mode is on.
bool exports_engine_metrics(const shm::SegmentHeader& identity);

// Whether a scheduler snapshot field is exported as a gauge (two fields are histograms in SGLang now).
bool exported_as_snapshot_gauge(std::string_view field);

// Gauge mode of a scheduler snapshot field (mostrecent, except SGLang's retract/pause gauges: all).
shm::GaugeMode snapshot_field_mode(std::string_view field);

// Adds every engine family that the generations contribute.
void collect_engine_metrics(const std::vector<const RankSegment*>& generations, const CollectOptions& options,
                            FamilySet& out);

}  // namespace rankstat
