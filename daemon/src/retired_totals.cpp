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
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <map>
#include <optional>
#include <stdexcept>
#include <string_view>
#include <utility>

#include "rankstat/shmproto/cumulative.hpp"
#include "rankstat/shmproto/segment.hpp"
#include "state_json.hpp"

namespace rankstat {
namespace {

using state_file::kStateVersion;
using state_file::labels_from;
using state_file::read_state_file;
using state_file::replace_file;
using state_file::total_from_json;
using state_file::total_json;
using state_file::valid_counter_total;
using state_file::valid_histogram;
using state_file::valid_series;

boost::json::array labels_json(const Labels& labels) {
  boost::json::array out;
  for (const auto& l : labels)
    out.push_back(boost::json::array{boost::json::string(l.name), boost::json::string(l.value)});
  return out;
}

boost::json::object counter_json(const std::string& family, const Labels& labels, double value,
                                 const std::string& help) {
  return boost::json::object{
      {"family", family}, {"labels", labels_json(labels)}, {"value", total_json(value)}, {"help", help}};
}

boost::json::object histogram_json(const std::string& family, const Labels& labels,
                                   const std::vector<double>& bounds,
                                   const std::vector<std::uint64_t>& counts, double sum,
                                   const std::string& help, bool summary) {
  return boost::json::object{{"family", family},
                             {"labels", labels_json(labels)},
                             {"bounds", boost::json::array(bounds.begin(), bounds.end())},
                             {"counts", boost::json::array(counts.begin(), counts.end())},
                             {"sum", total_json(sum)},
                             {"help", help},
                             {"summary", summary}};
}

// One counter or histogram entry of a state file, or nullopt with `why` when it must not be served (the
// file is input like any segment, checked as a segment's series would be). A
// malformed document throws (boost::json accessors), which refuses the whole file.
std::optional<CumulativeTotals::Counter> parse_counter(const boost::json::object& o, std::string& why) {
  CumulativeTotals::Counter c;
  c.value = total_from_json(o.at("value"));
  if (const auto* help = o.if_contains("help")) c.help = std::string(help->as_string());
  c.family = std::string(o.at("family").as_string());
  c.labels = std::make_shared<const Labels>(labels_from(o.at("labels").as_array()));
  if (!valid_series(c.family, *c.labels, why)) return std::nullopt;
  if (!valid_counter_total(c.value) || !shm::is_valid_utf8(c.help)) {
    why = "value negative, or help not UTF-8";
    return std::nullopt;
  }
  return c;
}

std::optional<CumulativeTotals::Histogram> parse_histogram(const boost::json::object& o, std::string& why) {
  CumulativeTotals::Histogram h;
  for (const auto& b : o.at("bounds").as_array()) h.bounds.push_back(b.to_number<double>());
  for (const auto& n : o.at("counts").as_array()) h.counts.push_back(n.to_number<std::uint64_t>());
  h.sum = total_from_json(o.at("sum"));
  if (const auto* help = o.if_contains("help")) h.help = std::string(help->as_string());
  if (const auto* summary = o.if_contains("summary")) h.summary = summary->as_bool();
  h.family = std::string(o.at("family").as_string());
  h.labels = std::make_shared<const Labels>(labels_from(o.at("labels").as_array()));
  if (!valid_series(h.family, *h.labels, why)) return std::nullopt;
  if (!valid_histogram(h.bounds, h.counts, h.summary) || !shm::is_valid_utf8(h.help)) {
    why = "bounds not finite and increasing, or bucket count mismatch";
    return std::nullopt;
  }
  return h;
}

}  // namespace

RetiredTotals::RetiredTotals(std::string state_dir)
    : dir_(std::move(state_dir)), checkpoints_(dir_.empty() ? std::string() : dir_ + "/integrals.json") {
  if (!dir_.empty()) path_ = dir_ + "/retired-totals.json";
}

void RetiredTotals::fold_unclaimed(const GenerationKey& generation) {
  if (const CumulativeTotals* totals = checkpoints_.totals_of(generation)) fold(generation, *totals);
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
  checkpoints_.load([this](const GenerationKey& key) { return holds(key) || holds_nonce(key.second); },
                    invalid_entries_);
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

void RetiredTotals::fold(const RankSegment& generation, const std::string& instance_label) {
  const GenerationKey key{generation.name(), generation.identity().generation};
  if (holds(key)) return;
  fold(key, cumulative_totals(generation, instance_label));
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
  // NaN and +Inf are kept like any total, as prometheus_client keeps them in a dead process's file.
  if (generations_.count(generation) != 0) return;
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
