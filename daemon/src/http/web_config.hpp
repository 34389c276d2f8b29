#pragma once

// The --web.config.file of Prometheus exporters (prometheus/exporter-toolkit's format): TLS server
// settings, extra response headers, bcrypt basic-auth users. Keys and meanings are exporter-toolkit's,
// so a file written for node_exporter works unchanged; unknown keys are errors, as its strict parser
// makes them.
//
// Threading contract: parsing and building a TLS context touch no shared state; any thread may call
// them. A WebConfig is an immutable value once built; share it as shared_ptr<const WebConfig>.

#include <boost/asio/ssl/context.hpp>

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace rankstat::http {

// A web config that cannot be used; what() names the key or file at fault.
class WebConfigError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Go's tls.ClientAuthType, under the names exporter-toolkit accepts.
enum class ClientAuth {
  kNoClientCert,
  kRequestClientCert,           // asked for, not required, not verified
  kRequireAnyClientCert,        // required, not verified against client_ca_file
  kVerifyClientCertIfGiven,     // optional, verified when sent
  kRequireAndVerifyClientCert,  // required and verified: the only secure client-certificate mode
};

std::string_view client_auth_name(ClientAuth auth);

struct TlsServerConfig {
  // PEM text given inline (cert, key, client_ca) or the file to read it from (the *_file keys, relative
  // to the web config's directory). Exactly one of each pair may be set.
  std::string cert_pem;
  std::string cert_file;
  std::string key_pem;
  std::string key_file;
  std::string client_ca_pem;
  std::string client_ca_file;
  ClientAuth client_auth = ClientAuth::kNoClientCert;
  // OpenSSL protocol version constants (TLS1_2_VERSION, ...).
  int min_version = 0;
  int max_version = 0;
  // OpenSSL names of the TLS 1.2-and-older suites in cipher_suites (TLS 1.3 suites are accepted in the
  // file and ignored, as Go ignores them); empty: OpenSSL's defaults.
  std::vector<std::string> openssl_ciphers;
  std::vector<std::string> openssl_groups;  // curve_preferences as OpenSSL group names, in order
  bool prefer_server_cipher_suites = true;
  // A client certificate must carry one of these as a DNS, e-mail, IP or URI SAN (exact match).
  std::vector<std::string> client_allowed_sans;
};

struct RateLimit {
  std::chrono::nanoseconds interval{0};  // between two requests; 0 disables the limiter
  int burst = 0;
};

struct WebConfig {
  std::optional<TlsServerConfig> tls;  // absent: plain HTTP, as exporter-toolkit serves it
  // http_server_config.headers, each validated against exporter-toolkit's fixed list.
  std::vector<std::pair<std::string, std::string>> headers;
  std::map<std::string, std::string> basic_auth_users;  // user -> bcrypt hash; empty: no auth
  // Request paths (exact match, no query) served without basic auth, e.g. probe endpoints.
  std::vector<std::string> basic_auth_excluded_paths;
  RateLimit rate_limit;
};

// Parses the YAML text of a web config. Relative *_file paths are resolved against `base_directory`
// (the config file's directory, as exporter-toolkit does). Reads no file. Throws WebConfigError.
WebConfig parse_web_config(std::string_view yaml_text, const std::string& base_directory);

// Reads and parses `path`, then checks that the TLS files can be read and form a usable context.
// Throws WebConfigError naming the file or key.
WebConfig load_web_config(const std::string& path);

// An OpenSSL server context for `tls`: certificates loaded, versions, ciphers, groups and client
// verification set. Throws WebConfigError naming the file that could not be read or used.
std::shared_ptr<boost::asio::ssl::context> make_tls_context(const TlsServerConfig& tls);

}  // namespace rankstat::http
