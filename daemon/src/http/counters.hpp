#pragma once

// The HTTP layer's counters, listed once. Every use expands these lists: the server's atomic cells
// (accept_loop.hpp), the plain snapshot http::Counters, and the rankstat_http_* self-metric families
// (self_metrics.cpp walks kCounterInfo), so a counter cannot be added in one place and forgotten in
// another.
//
// One row per value, in the order /metrics shows them:
//   X(member, type, family, label_name, label_value, help)
// member: the field of http::Counters; type: kCounter or kGauge (a CounterType); family: the metric
// name; label_name and label_value: "" "", or the one label telling the rows of one family apart. The rows of
// a family are adjacent; the first gives the help, the others "" (checked below).

#include <cstddef>
#include <cstdint>
#include <string_view>

// clang-format off
// Counted by the server (http::Server) as connections and requests come and go.
#define RANKSTAT_HTTP_SERVER_COUNTERS(X)                                                                   \
  X(requests_total, kCounter, "rankstat_http_requests_total", "", "", "HTTP requests answered.")           \
  X(connections_rejected_total, kCounter, "rankstat_http_connections_rejected_total", "", "",              \
    "Connections refused because the connection limit was reached.")                                       \
  X(bad_requests_total, kCounter, "rankstat_http_bad_requests_total", "", "",                              \
    "Malformed or oversized HTTP requests.")                                                               \
  X(active_connections, kGauge, "rankstat_http_active_connections", "", "", "Open HTTP connections.")      \
  X(connections_evicted_idle_total, kCounter, "rankstat_http_connections_evicted_total", "reason", "idle", \
    "Connections closed at the connection limit to admit a new one, by what they were doing.")             \
  X(connections_evicted_reading_headers_total, kCounter, "rankstat_http_connections_evicted_total",        \
    "reason", "reading_headers", "")                                                                       \
  X(connections_evicted_reading_body_total, kCounter, "rankstat_http_connections_evicted_total",           \
    "reason", "reading_body", "")                                                                          \
  X(connections_refused_per_peer_total, kCounter, "rankstat_http_connections_refused_per_peer_total", "",  \
    "", "Connections refused because their address held --web.max-connections-per-peer.")                  \
  X(header_timeouts_total, kCounter, "rankstat_http_header_timeouts_total", "", "",                        \
    "Connections closed because request headers were incomplete at --web.header-timeout.")                 \
  X(tls_handshake_failures_total, kCounter, "rankstat_http_tls_handshake_failures_total", "", "",          \
    "TLS handshakes that failed or did not finish within --web.header-timeout (no or untrusted client "    \
    "certificate, protocol mismatch).")

// Counted by the request handler (the daemon's Routes) when the web config refuses a request.
#define RANKSTAT_HTTP_HANDLER_COUNTERS(X)                                                                  \
  X(auth_failures_missing_total, kCounter, "rankstat_http_auth_failures_total", "reason", "missing",       \
    "Requests refused with 401 by basic_auth_users of --web.config.file, by reason: missing (no usable "   \
    "credentials) or wrong (unknown user or wrong password).")                                             \
  X(auth_failures_wrong_total, kCounter, "rankstat_http_auth_failures_total", "reason", "wrong", "")       \
  X(rate_limited_total, kCounter, "rankstat_http_rate_limited_total", "", "",                              \
    "Requests refused with 429 by rate_limit of --web.config.file.")

#define RANKSTAT_HTTP_COUNTERS(X) RANKSTAT_HTTP_SERVER_COUNTERS(X) RANKSTAT_HTTP_HANDLER_COUNTERS(X)
// clang-format on

namespace rankstat::http {

// A snapshot of every HTTP counter. Server::counters() fills the server's rows; the handler's owner adds
// its own.
struct Counters {
#define RANKSTAT_HTTP_COUNTER_FIELD(member, ...) std::uint64_t member = 0;
  RANKSTAT_HTTP_COUNTERS(RANKSTAT_HTTP_COUNTER_FIELD)
#undef RANKSTAT_HTTP_COUNTER_FIELD
};

enum class CounterType : std::uint8_t { kCounter, kGauge };

// One row of the lists above, for whoever renders them.
struct CounterInfo {
  std::uint64_t Counters::*member;
  CounterType type;
  std::string_view family;
  std::string_view label_name;  // "" when the family has one row
  std::string_view label_value;
  std::string_view help;  // "" on every row of a family but the first
};

#define RANKSTAT_HTTP_COUNTER_INFO(member, type, family, label_name, label_value, help) \
  CounterInfo{&Counters::member, CounterType::type, family, label_name, label_value, help},
inline constexpr CounterInfo kCounterInfo[] = {RANKSTAT_HTTP_COUNTERS(RANKSTAT_HTTP_COUNTER_INFO)};
#undef RANKSTAT_HTTP_COUNTER_INFO

// Whether the rows of each family are adjacent, of one type, and the help given exactly on the first.
template <std::size_t N>
constexpr bool families_well_formed(const CounterInfo (&rows)[N]) {
  for (std::size_t i = 0; i < N; ++i) {
    const bool first = i == 0 || rows[i - 1].family != rows[i].family;
    if (first != !rows[i].help.empty()) return false;
    if (!first && (rows[i - 1].type != rows[i].type || rows[i].label_name.empty())) return false;
    for (std::size_t j = 0; j + 1 < i; ++j) {
      if (rows[j].family == rows[i].family && rows[j + 1].family != rows[i].family) return false;
    }
  }
  return true;
}
static_assert(families_well_formed(kCounterInfo),
              "a family's rows must be adjacent, labelled, of one type, with the help on the first");

}  // namespace rankstat::http
