// Where rank documents come from: the daemon's JSON API (default) or the segments themselves
// (--direct). Both produce the documents described in docs/api.md, with the same field names.
#pragma once

#include <boost/json/array.hpp>
#include <boost/json/object.hpp>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "address.hpp"
#include "http_client.hpp"

namespace rankstat::cli {

// The daemon cannot be reached, or (--direct) there is no segment to read: exit code 3.
class SourceUnavailable : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Anything else that went wrong while reading: exit code 1.
class SourceError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class RankSource {
 public:
  virtual ~RankSource() = default;
  // {"shm_dir": ..., "ranks": [summary, ...], "rejected_segments": {reason: count}}
  virtual boost::json::object ranks() = 0;
  // The detail document of rank `id` (<instance>.<role>.<rank-key>), or nullopt if there is none.
  virtual std::optional<boost::json::object> rank(const std::string& id) = 0;
  // The ranks document with every current rank's detail document in place of its summary, in id order
  // (what `top` shows): {"shm_dir", "ranks": [detail, ...], "rejected_segments", "details": true}.
  virtual boost::json::object all_details() = 0;
  // "daemon 127.0.0.1:9473" or "direct /dev/shm", for headers.
  virtual std::string description() const = 0;
};

struct DaemonOptions {
  Endpoint endpoint;
  std::chrono::milliseconds timeout{5000};
  ClientSecurity security;  // TLS trust, client certificate and basic auth for a secured daemon
};

struct DirectOptions {
  std::string shm_dir = "/dev/shm";
  std::chrono::milliseconds stall_after{30000};
  // One-shot reads sample records_written twice this far apart to report records_per_second.
  std::chrono::milliseconds rate_window{250};
  // Segment owners trusted besides this user and root (the daemon's rule, --allowed-uids). A segment of
  // any other owner is still shown, marked "untrusted_owner" with a warning: its values may be forged.
  std::vector<std::uint32_t> trusted_uids;
};

std::unique_ptr<RankSource> make_daemon_source(DaemonOptions options);
std::unique_ptr<RankSource> make_direct_source(DirectOptions options);

}  // namespace rankstat::cli
