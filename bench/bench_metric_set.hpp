// The SGLang scheduler metric set of the side-by-side benchmarks (bench/sglang_scheduler_set.tsv), and
// a simulated scheduler rank that publishes it through rankstat::Reporter: the scheduler snapshot
// record for the SchedulerStats gauges, cumulative series for the constants, counters and histograms.
// The Python anchor (bench/anchor_multiprocess.py) reads the same file, so both sides export the same
// families, label sets and buckets.
#pragma once

#include <cmath>
#include <cstdint>
#include <fstream>
#include <optional>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "fake_rank.hpp"
#include "rankstat/reporter.hpp"

namespace rankstat::bench {

struct MetricRow {
  std::string kind;    // gauge | counter | histogram
  std::string family;  // sglang:...
  std::string mode;    // gauge mode as prometheus_client names it
  std::string label_name;
  std::vector<std::string> label_values;  // empty: the series has no own label
  std::vector<double> buckets;
  std::string source;  // snapshot | constant | step
};

inline std::vector<std::string> split(const std::string& text, char separator) {
  std::vector<std::string> out;
  std::string item;
  std::istringstream in(text);
  while (std::getline(in, item, separator)) out.push_back(item);
  return out;
}

inline std::vector<MetricRow> load_metric_set(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read metric set " + path);
  std::vector<MetricRow> rows;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    const std::vector<std::string> f = split(line, '\t');
    if (f.size() != 6) throw std::runtime_error("bad metric-set line: " + line);
    MetricRow row;
    row.kind = f[0];
    row.family = f[1];
    row.mode = f[2];
    if (f[3] != "-") {
      const auto eq = f[3].find('=');
      row.label_name = f[3].substr(0, eq);
      row.label_values = split(f[3].substr(eq + 1), '|');
    }
    if (f[4] != "-") {
      for (const std::string& b : split(f[4], ',')) row.buckets.push_back(std::stod(b));
    }
    row.source = f[5];
    rows.push_back(std::move(row));
  }
  return rows;
}

inline shm::GaugeMode gauge_mode(const std::string& mode) {
  const std::optional<shm::GaugeMode> known = fake_rank::gauge_mode(mode);
  if (!known) throw std::runtime_error("unknown gauge mode " + mode);
  return *known;
}

// One simulated scheduler rank: registers the metric set once, then publishes one logged step per
// call to step() (a snapshot record plus the counter and histogram updates SGLang makes per step).
class SimulatedRank {
 public:
  SimulatedRank(Reporter& reporter, const std::vector<MetricRow>& rows, std::uint32_t seed)
      : reporter_(reporter), random_(seed) {
    for (const MetricRow& row : rows) {
      if (row.source == "snapshot") continue;  // the scheduler snapshot record carries these
      std::vector<std::string> values = row.label_values;
      if (values.empty()) values.emplace_back();
      for (const std::string& value : values) {
        shm::LabelPairs labels;
        if (!row.label_name.empty()) labels.emplace_back(row.label_name, value);
        std::uint32_t id = 0;
        Status status = Status::kOk;
        if (row.kind == "gauge") {
          status = reporter_.register_gauge(row.family, gauge_mode(row.mode), labels, id);
        } else if (row.kind == "counter") {
          status = reporter_.register_counter(row.family, labels, id);
        } else {
          status = reporter_.register_histogram(row.family, labels, row.buckets, id);
        }
        if (status != Status::kOk) {
          throw std::runtime_error("registering " + row.family +
                                   " failed: " + std::string(status_name(status)));
        }
        Series s{row.kind, row.source, id, row.buckets.empty() ? 1.0 : row.buckets.back()};
        if (row.kind == "gauge" && row.source == "constant") {
          reporter_.gauge_set(id, constant_value(row.family, value));
        }
        series_.push_back(s);
      }
    }
  }

  // One logged scheduler step: a snapshot with new values, a counter add and an observation per series.
  void step(std::uint64_t step_index) {
    std::uniform_real_distribution<double> unit(0.0, 1.0);
    shm::SchedulerSnapshot s{};
    s.report_kind = static_cast<std::uint32_t>(step_index % 4 == 0 ? shm::ReportKind::kPrefill
                                                                   : shm::ReportKind::kDecode);
    s.groups = shm::kGroupSpeculative;
    s.num_running_reqs = static_cast<std::int64_t>(unit(random_) * 64);
    s.num_queue_reqs = static_cast<std::int64_t>(unit(random_) * 16);
    s.gen_throughput = 1000 + unit(random_) * 4000;
    s.cache_hit_rate = unit(random_);
    s.decode_sum_seq_lens = static_cast<std::int64_t>(unit(random_) * 200000);
    s.full_token_usage = unit(random_);
    s.token_usage = std::round(s.full_token_usage * 100) / 100;
    s.num_used_tokens = static_cast<std::int64_t>(s.full_token_usage * 200000);
    s.kv_used_tokens = s.num_used_tokens;
    s.kv_evictable_tokens = static_cast<std::int64_t>(unit(random_) * 20000);
    s.kv_available_tokens = 200000 - s.kv_used_tokens - s.kv_evictable_tokens;
    s.spec_accept_length = 1 + unit(random_) * 2.5;
    s.spec_accept_rate = (s.spec_accept_length - 1) / 3;
    s.spec_cap_length = 4;
    s.spec_num_steps = 3;
    s.spec_num_draft_tokens = 4;
    s.utilization = unit(random_);
    s.fwd_occupancy = 60 + 35 * unit(random_);
    s.new_token_ratio = 0.4 + 0.3 * unit(random_);
    s.is_cuda_graph = s.report_kind == static_cast<std::uint32_t>(shm::ReportKind::kDecode) ? 1 : 0;
    last_status_ = reporter_.report_scheduler(s);
    for (const Series& series : series_) {
      if (series.source != "step") continue;
      if (series.kind == "counter") {
        reporter_.counter_add(series.id, std::floor(unit(random_) * 512));
      } else if (series.kind == "histogram") {
        // Latencies spread over the buckets (log-uniform up to the last bound).
        reporter_.histogram_observe(series.id, series.top * std::pow(10.0, -4 * unit(random_)));
      }
    }
  }

  // Publishes a snapshot whose num_running_reqs is `value` (freshness probe).
  Status report_value(std::int64_t value) {
    shm::SchedulerSnapshot s{};
    s.report_kind = static_cast<std::uint32_t>(shm::ReportKind::kDecode);
    s.num_running_reqs = value;
    return reporter_.report_scheduler(s);
  }

  Status last_status() const { return last_status_; }

 private:
  struct Series {
    std::string kind;
    std::string source;
    std::uint32_t id;
    double top;  // largest finite bucket bound
  };

  static double constant_value(const std::string& family, const std::string& label) {
    if (family == "sglang:max_total_num_tokens") return 1'048'576;
    if (family == "sglang:context_len") return 131'072;
    if (family == "sglang:page_size") return 1;
    if (family == "sglang:num_pages") return 1'048'576;
    if (family == "sglang:graph_memory_usage_gb") return label == "decode" ? 1.734 : 0.25;
    if (family == "sglang:weight_memory_usage_gb") return 15.26;
    if (family == "sglang:kv_cache_memory_usage_gb") return 48.5;
    if (family == "sglang:startup_available_gpu_memory_gb") return 78.93;
    if (family == "sglang:max_running_requests_under_SLO") return 256;
    return 0;
  }

  Reporter& reporter_;
  std::mt19937_64 random_;
  std::vector<Series> series_;
  Status last_status_ = Status::kOk;
};

}  // namespace rankstat::bench
