#include "state_json.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <limits>
#include <random>
#include <stdexcept>

#include "rankstat/shmproto/cumulative.hpp"
#include "rankstat/shmproto/segment.hpp"

namespace rankstat::state_file {
namespace {

constexpr std::string_view kNaN = "NaN";
constexpr std::string_view kPlusInf = "+Inf";
constexpr std::string_view kMinusInf = "-Inf";

std::string_view non_finite_text(double value) {
  if (std::isnan(value)) return kNaN;
  return value > 0 ? kPlusInf : kMinusInf;
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

Labels labels_from(const boost::json::array& in) {
  Labels out;
  for (const auto& pair : in) {
    const auto& p = pair.as_array();
    out.push_back({std::string(p.at(0).as_string()), std::string(p.at(1).as_string())});
  }
  return out;
}

// A series as the exposition would emit it: valid names, UTF-8 values, no duplicate or reserved label.
// The state files are input like any segment: what they name is checked as a segment's series would be.
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

boost::json::value total_json(double value) {
  if (std::isfinite(value)) return value;
  return boost::json::string(non_finite_text(value));
}

double total_from_json(const boost::json::value& value) {
  if (!value.is_string()) return value.to_number<double>();
  const std::string_view text = value.get_string();
  if (text == kNaN) return std::numeric_limits<double>::quiet_NaN();
  if (text == kPlusInf) return std::numeric_limits<double>::infinity();
  if (text == kMinusInf) return -std::numeric_limits<double>::infinity();
  throw std::invalid_argument("a number written as the string '" + std::string(text) +
                              R"(' (only "NaN", "+Inf" and "-Inf" are))");
}

// A counter total as the exposition may serve it: a number that is not negative, +Inf, or NaN.
bool valid_counter_total(double value) {
  return std::isnan(value) || value >= 0;
}

bool valid_histogram(const std::vector<double>& bounds, const std::vector<std::uint64_t>& counts,
                     bool summary) {
  if (counts.size() != bounds.size() + 1 || (summary && !bounds.empty())) return false;
  for (std::size_t i = 0; i < bounds.size(); ++i) {
    if (!std::isfinite(bounds[i]) || (i > 0 && bounds[i] <= bounds[i - 1])) return false;
  }
  return true;
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

// A counter total or a histogram sum: a number, or the string of a non-finite one (total_json).
void append_json_total(std::string& out, double value) {
  if (std::isfinite(value)) {
    append_json_number(out, value);
  } else {
    out.push_back('"');
    out.append(non_finite_text(value));
    out.push_back('"');
  }
}

// A label set as the checkpoint writes it; empty when a name or value is not UTF-8.
std::string labels_text(const Labels& labels) {
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

}  // namespace rankstat::state_file
