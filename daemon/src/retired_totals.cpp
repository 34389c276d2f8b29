#include "retired_totals.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <boost/json/value.hpp>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>

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

}  // namespace

RetiredTotals::RetiredTotals(std::string state_dir) {
  if (!state_dir.empty()) path_ = state_dir + "/retired-totals.json";
}

bool RetiredTotals::load(std::string& error) {
  if (path_.empty()) return true;
  std::ifstream in(path_);
  if (!in) return true;  // first start
  std::stringstream text;
  text << in.rdbuf();
  try {
    const boost::json::object doc = boost::json::parse(text.str()).as_object();
    if (doc.at("version").as_int64() != kStateVersion) {
      error = path_ + ": unknown state version " + boost::json::serialize(doc.at("version"));
      return false;
    }
    for (const auto& g : doc.at("generations").as_array()) {
      const auto& a = g.as_array();
      generations_.insert({std::string(a.at(0).as_string()), std::stoull(std::string(a.at(1).as_string()))});
    }
    for (const auto& c : doc.at("counters").as_array()) {
      const auto& o = c.as_object();
      Counter counter;
      counter.value = o.at("value").to_number<double>();
      if (const auto* help = o.if_contains("help")) counter.help = std::string(help->as_string());
      counters_[{std::string(o.at("family").as_string()), labels_from(o.at("labels").as_array())}] =
          std::move(counter);
    }
    for (const auto& h : doc.at("histograms").as_array()) {
      const auto& o = h.as_object();
      Histogram hist;
      for (const auto& b : o.at("bounds").as_array()) hist.bounds.push_back(b.to_number<double>());
      for (const auto& n : o.at("counts").as_array()) hist.counts.push_back(n.to_number<std::uint64_t>());
      hist.sum = o.at("sum").to_number<double>();
      if (const auto* help = o.if_contains("help")) hist.help = std::string(help->as_string());
      if (const auto* summary = o.if_contains("summary")) hist.summary = summary->as_bool();
      if (hist.summary && !hist.bounds.empty()) throw std::runtime_error("a summary with bucket bounds");
      if (hist.counts.size() != hist.bounds.size() + 1) throw std::runtime_error("bucket count mismatch");
      histograms_[{std::string(o.at("family").as_string()), labels_from(o.at("labels").as_array())}] =
          std::move(hist);
    }
  } catch (const std::exception& e) {
    generations_.clear();
    counters_.clear();
    histograms_.clear();
    error = path_ + " is not a valid state file (" + e.what() + "); starting without retired totals";
    return false;
  }
  return true;
}

bool RetiredTotals::save(std::string& error) const {
  if (path_.empty()) return true;
  boost::json::object doc;
  doc["version"] = kStateVersion;
  boost::json::array generations;
  for (const auto& [name, nonce] : generations_) {
    generations.push_back(
        boost::json::array{boost::json::string(name), boost::json::string(std::to_string(nonce))});
  }
  doc["generations"] = std::move(generations);
  boost::json::array counters;
  for (const auto& [key, c] : counters_) {
    counters.push_back(boost::json::object{
        {"family", key.first}, {"labels", labels_json(key.second)}, {"value", c.value}, {"help", c.help}});
  }
  doc["counters"] = std::move(counters);
  boost::json::array histograms;
  for (const auto& [key, h] : histograms_) {
    boost::json::array bounds(h.bounds.begin(), h.bounds.end());
    boost::json::array counts(h.counts.begin(), h.counts.end());
    histograms.push_back(boost::json::object{{"family", key.first},
                                             {"labels", labels_json(key.second)},
                                             {"bounds", std::move(bounds)},
                                             {"counts", std::move(counts)},
                                             {"sum", h.sum},
                                             {"help", h.help},
                                             {"summary", h.summary}});
  }
  doc["histograms"] = std::move(histograms);
  const std::string text = boost::json::serialize(doc) + "\n";
  const std::string temporary = path_ + ".tmp";
  const int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0640);
  if (fd < 0) {
    error = "cannot write " + temporary + ": " + std::strerror(errno);
    return false;
  }
  const bool ok = write_all(fd, text) && ::fsync(fd) == 0;
  const int saved_errno = errno;
  ::close(fd);
  if (!ok || ::rename(temporary.c_str(), path_.c_str()) != 0) {
    error = "cannot write " + path_ + ": " + std::strerror(ok ? errno : saved_errno);
    ::unlink(temporary.c_str());
    return false;
  }
  // The rename must reach the disk before the segment it accounts for is unlinked.
  const std::string dir = path_.substr(0, path_.rfind('/'));
  if (const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
  return true;
}

void RetiredTotals::forget_generations_except(const std::set<GenerationKey>& still_present) {
  for (auto it = generations_.begin(); it != generations_.end();) {
    it = still_present.count(*it) != 0 ? std::next(it) : generations_.erase(it);
  }
}

void RetiredTotals::add_counter(const GenerationKey& generation, const std::string& family,
                                const Labels& labels, double value, const std::string& help) {
  if (generations_.count(generation) != 0 || !std::isfinite(value)) return;
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
  } else if (h.bounds != bounds || h.summary != summary) {
    return;  // the live aggregation counts this conflict; a retired total cannot merge it either
  }
  for (std::size_t i = 0; i < counts.size(); ++i) h.counts[i] += counts[i];
  h.sum += sum;
  if (!help.empty()) h.help = help;
}

void RetiredTotals::contribute(FamilySet& out) const {
  for (const auto& [key, c] : counters_) {
    out.add_counter(key.first, c.help, key.second, c.value);
  }
  for (const auto& [key, h] : histograms_) {
    out.add_histogram(key.first, h.help, key.second, h.bounds, h.counts, h.sum, {}, nullptr, 0, h.summary);
  }
}

}  // namespace rankstat
