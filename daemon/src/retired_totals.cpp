#include "retired_totals.hpp"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <boost/json/value.hpp>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <optional>
#include <random>
#include <stdexcept>
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
  Checkpoints out = std::move(it->second);
  unclaimed_checkpoints_.erase(it);
  return out;
}

bool RetiredTotals::save_checkpoints(const std::map<GenerationKey, Checkpoints>& live, bool drop_unclaimed,
                                     std::string& error) {
  if (checkpoint_path_.empty()) return true;
  if (drop_unclaimed) unclaimed_checkpoints_.clear();
  boost::json::array generations;
  auto put = [&](const GenerationKey& key, const Checkpoints& checkpoints) {
    boost::json::array entries;
    for (const auto& [name, c] : checkpoints) {
      entries.push_back(boost::json::object{{"key", name},
                                            {"integral", c.integral},
                                            {"value", c.value},
                                            {"until_ns", std::to_string(c.until_ns)}});
    }
    generations.push_back(boost::json::object{
        {"segment", key.first}, {"generation", std::to_string(key.second)}, {"gauges", std::move(entries)}});
  };
  for (const auto& [key, checkpoints] : live) put(key, checkpoints);
  for (const auto& [key, checkpoints] : unclaimed_checkpoints_) {
    if (live.count(key) == 0) put(key, checkpoints);
  }
  boost::json::object doc;
  doc["version"] = kStateVersion;
  doc["generations"] = std::move(generations);
  std::string text = boost::json::serialize(doc) + "\n";
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
  load_checkpoints();
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
      const auto& o = c.as_object();
      Counter counter;
      counter.value = o.at("value").to_number<double>();
      if (const auto* help = o.if_contains("help")) counter.help = std::string(help->as_string());
      std::string family(o.at("family").as_string());
      Labels labels = labels_from(o.at("labels").as_array());
      std::string why;
      if (!valid_series(family, labels, why)) {
        drop(family, why);
        continue;
      }
      if (!std::isfinite(counter.value) || counter.value < 0 || !shm::is_valid_utf8(counter.help)) {
        drop(family, "value not a finite non-negative number, or help not UTF-8");
        continue;
      }
      counters_[{std::move(family), std::move(labels)}] = std::move(counter);
    }
    for (const auto& h : doc.at("histograms").as_array()) {
      const auto& o = h.as_object();
      Histogram hist;
      for (const auto& b : o.at("bounds").as_array()) hist.bounds.push_back(b.to_number<double>());
      for (const auto& n : o.at("counts").as_array()) hist.counts.push_back(n.to_number<std::uint64_t>());
      hist.sum = o.at("sum").to_number<double>();
      if (const auto* help = o.if_contains("help")) hist.help = std::string(help->as_string());
      if (const auto* summary = o.if_contains("summary")) hist.summary = summary->as_bool();
      std::string family(o.at("family").as_string());
      Labels labels = labels_from(o.at("labels").as_array());
      std::string why;
      if (!valid_series(family, labels, why)) {
        drop(family, why);
        continue;
      }
      if (!valid_histogram(hist.bounds, hist.counts, hist.sum, hist.summary) ||
          !shm::is_valid_utf8(hist.help)) {
        drop(family, "bounds not finite and increasing, bucket count mismatch, or sum not finite");
        continue;
      }
      histograms_[{std::move(family), std::move(labels)}] = std::move(hist);
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
  // Only a hint for continuity: a missing or unreadable file starts the integrals of live generations
  // at 0 (Prometheus reads that as one counter reset), it never stops the daemon.
  const auto text = read_state_file(checkpoint_path_);
  if (!text) {
    if (errno != ENOENT) spdlog::warn("{} cannot be read; live integrals start at 0", checkpoint_path_);
    return;
  }
  try {
    const boost::json::object doc = boost::json::parse(*text).as_object();
    if (doc.at("version").as_int64() != kStateVersion) throw std::runtime_error("unknown version");
    for (const auto& g : doc.at("generations").as_array()) {
      const auto& o = g.as_object();
      const GenerationKey key{std::string(o.at("segment").as_string()),
                              std::stoull(std::string(o.at("generation").as_string()))};
      Checkpoints& checkpoints = unclaimed_checkpoints_[key];
      for (const auto& e : o.at("gauges").as_array()) {
        const auto& entry = e.as_object();
        IntegralCheckpoint c;
        c.integral = entry.at("integral").to_number<double>();
        c.value = entry.at("value").to_number<double>();
        c.until_ns = std::stoull(std::string(entry.at("until_ns").as_string()));
        // Forged or damaged numbers are refused here; GaugeTrack::restore refuses them again.
        if (!std::isfinite(c.integral) || c.integral < 0 || !std::isfinite(c.value)) continue;
        checkpoints[std::string(entry.at("key").as_string())] = c;
      }
    }
  } catch (const std::exception& e) {
    unclaimed_checkpoints_.clear();
    spdlog::warn("{} is not a valid integral checkpoint ({}); live integrals start at 0", checkpoint_path_,
                 e.what());
  }
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
  if (!replace_file(path_, text, /*durable=*/true, error)) return false;
  // The rename must reach the disk before the segment it accounts for is unlinked.
  const std::string dir = path_.substr(0, path_.rfind('/'));
  if (const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC); dfd >= 0) {
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
