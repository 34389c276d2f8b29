#include "http/web_config.hpp"

#include "rankstat/flags/duration.hpp"

#include <arpa/inet.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

namespace rankstat::http {

namespace {

namespace asio = boost::asio;

// A file larger than this is not a web config (inline certificates are a few kilobytes each).
constexpr std::size_t kMaxWebConfigBytes = 1 << 20;

[[noreturn]] void fail(const std::string& message) {
  throw WebConfigError(message);
}

std::string where(const YAML::Node& node) {
  const YAML::Mark mark = node.Mark();
  if (mark.is_null()) return "";
  return " (line " + std::to_string(mark.line + 1) + ")";
}

// Checks that `node` is a mapping whose keys are among `allowed` and appear once each; `path` names it in
// errors ("tls_server_config").
void check_keys(const YAML::Node& node, const std::string& path,
                std::initializer_list<std::string_view> allowed) {
  if (!node.IsMap()) fail(path + ": expected a mapping" + where(node));
  std::set<std::string> seen;
  for (const auto& entry : node) {
    if (!entry.first.IsScalar()) fail(path + ": keys must be strings" + where(entry.first));
    const std::string key = entry.first.Scalar();
    if (std::find(allowed.begin(), allowed.end(), key) == allowed.end()) {
      fail(std::string(path.empty() ? "" : path + ": ") + "unknown key '" + key + "'" + where(entry.first));
    }
    if (!seen.insert(key).second) fail(path + ": key '" + key + "' given twice" + where(entry.first));
  }
}

std::string key_path(const std::string& parent, const std::string& key) {
  return parent.empty() ? key : parent + "." + key;
}

// A null node (`key:` with nothing after it) counts as absent, as in Go's YAML decoder.
bool present(const YAML::Node& node) {
  return node.IsDefined() && !node.IsNull();
}

std::string scalar(const YAML::Node& node, const std::string& path) {
  if (!node.IsScalar()) fail(path + ": expected a string" + where(node));
  return node.Scalar();
}

bool boolean(const YAML::Node& node, const std::string& path) {
  bool value = false;
  if (!node.IsScalar() || !YAML::convert<bool>::decode(node, value)) {
    fail(path + ": expected true or false" + where(node));
  }
  return value;
}

std::vector<std::string> string_list(const YAML::Node& node, const std::string& path) {
  if (!present(node)) return {};
  if (!node.IsSequence()) fail(path + ": expected a list" + where(node));
  std::vector<std::string> items;
  for (const auto& item : node) items.push_back(scalar(item, path + "[]"));
  return items;
}

int tls_version(const std::string& name, const std::string& path) {
  static constexpr std::array<std::pair<std::string_view, int>, 4> kVersions = {{
      {"TLS10", TLS1_VERSION},
      {"TLS11", TLS1_1_VERSION},
      {"TLS12", TLS1_2_VERSION},
      {"TLS13", TLS1_3_VERSION},
  }};
  for (const auto& [text, version] : kVersions) {
    if (name == text) return version;
  }
  fail(path + ": unknown TLS version '" + name + "' (use TLS10, TLS11, TLS12 or TLS13)");
}

// Go's crypto/tls cipher suite names (those tls.CipherSuites() lists) and the OpenSSL name of each; the
// TLS 1.3 suites map to nothing because neither Go nor exporter-toolkit lets them be configured.
struct CipherName {
  std::string_view go;
  std::string_view openssl;
};
constexpr std::array<CipherName, 17> kCipherSuites = {{
    {"TLS_RSA_WITH_AES_128_CBC_SHA", "AES128-SHA"},
    {"TLS_RSA_WITH_AES_256_CBC_SHA", "AES256-SHA"},
    {"TLS_RSA_WITH_AES_128_GCM_SHA256", "AES128-GCM-SHA256"},
    {"TLS_RSA_WITH_AES_256_GCM_SHA384", "AES256-GCM-SHA384"},
    {"TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA", "ECDHE-ECDSA-AES128-SHA"},
    {"TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA", "ECDHE-ECDSA-AES256-SHA"},
    {"TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA", "ECDHE-RSA-AES128-SHA"},
    {"TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA", "ECDHE-RSA-AES256-SHA"},
    {"TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256", "ECDHE-ECDSA-AES128-GCM-SHA256"},
    {"TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384", "ECDHE-ECDSA-AES256-GCM-SHA384"},
    {"TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256", "ECDHE-RSA-AES128-GCM-SHA256"},
    {"TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384", "ECDHE-RSA-AES256-GCM-SHA384"},
    {"TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256", "ECDHE-RSA-CHACHA20-POLY1305"},
    {"TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256", "ECDHE-ECDSA-CHACHA20-POLY1305"},
    {"TLS_AES_128_GCM_SHA256", ""},
    {"TLS_AES_256_GCM_SHA384", ""},
    {"TLS_CHACHA20_POLY1305_SHA256", ""},
}};

// Go's tls.CurveID names as exporter-toolkit accepts them, and OpenSSL's group names.
constexpr std::array<CipherName, 4> kCurves = {{
    {"CurveP256", "P-256"},
    {"CurveP384", "P-384"},
    {"CurveP521", "P-521"},
    {"X25519", "X25519"},
}};

ClientAuth client_auth_of(const std::string& name, const std::string& path) {
  if (name.empty() || name == "NoClientCert") return ClientAuth::kNoClientCert;
  if (name == "RequestClientCert") return ClientAuth::kRequestClientCert;
  // "RequireClientCert" is exporter-toolkit's older spelling, still accepted there.
  if (name == "RequireAnyClientCert" || name == "RequireClientCert") return ClientAuth::kRequireAnyClientCert;
  if (name == "VerifyClientCertIfGiven") return ClientAuth::kVerifyClientCertIfGiven;
  if (name == "RequireAndVerifyClientCert") return ClientAuth::kRequireAndVerifyClientCert;
  fail(path + ": invalid client_auth_type '" + name +
       "' (NoClientCert, RequestClientCert, RequireAnyClientCert, VerifyClientCertIfGiven or "
       "RequireAndVerifyClientCert)");
}

std::string resolve(const std::string& file, const std::string& base_directory) {
  if (file.empty() || file.front() == '/' || base_directory.empty()) return file;
  return (std::filesystem::path(base_directory) / file).string();
}

std::optional<TlsServerConfig> parse_tls(const YAML::Node& node, const std::string& base_directory) {
  const std::string path = "tls_server_config";
  if (!present(node)) return std::nullopt;
  check_keys(node, path,
             {"cert", "key", "client_ca", "cert_file", "key_file", "client_auth_type", "client_ca_file",
              "client_allowed_sans", "min_version", "max_version", "cipher_suites",
              "prefer_server_cipher_suites", "curve_preferences"});
  TlsServerConfig tls;
  std::string client_auth_text;
  const auto text = [&](const char* key, std::string& out) {
    if (present(node[key])) out = scalar(node[key], key_path(path, key));
  };
  text("cert", tls.cert_pem);
  text("key", tls.key_pem);
  text("client_ca", tls.client_ca_pem);
  text("cert_file", tls.cert_file);
  text("key_file", tls.key_file);
  text("client_ca_file", tls.client_ca_file);
  text("client_auth_type", client_auth_text);
  tls.client_auth = client_auth_of(client_auth_text, key_path(path, "client_auth_type"));
  tls.min_version = TLS1_2_VERSION;
  tls.max_version = TLS1_3_VERSION;
  if (present(node["min_version"])) {
    tls.min_version = tls_version(scalar(node["min_version"], path + ".min_version"), path + ".min_version");
  }
  if (present(node["max_version"])) {
    tls.max_version = tls_version(scalar(node["max_version"], path + ".max_version"), path + ".max_version");
  }
  if (present(node["prefer_server_cipher_suites"])) {
    tls.prefer_server_cipher_suites =
        boolean(node["prefer_server_cipher_suites"], path + ".prefer_server_cipher_suites");
  }
  for (const std::string& name : string_list(node["cipher_suites"], path + ".cipher_suites")) {
    const auto* found = std::find_if(kCipherSuites.begin(), kCipherSuites.end(),
                                     [&](const CipherName& c) { return c.go == name; });
    if (found == kCipherSuites.end()) fail(path + ".cipher_suites: unknown cipher '" + name + "'");
    if (!found->openssl.empty()) tls.openssl_ciphers.emplace_back(found->openssl);
  }
  for (const std::string& name : string_list(node["curve_preferences"], path + ".curve_preferences")) {
    const auto* found =
        std::find_if(kCurves.begin(), kCurves.end(), [&](const CipherName& c) { return c.go == name; });
    if (found == kCurves.end()) fail(path + ".curve_preferences: unknown curve '" + name + "'");
    tls.openssl_groups.emplace_back(found->openssl);
  }
  const bool allowed_sans_given = present(node["client_allowed_sans"]);
  tls.client_allowed_sans = string_list(node["client_allowed_sans"], path + ".client_allowed_sans");

  // exporter-toolkit serves plain HTTP unless a certificate, key, client CA or client auth type is set.
  const bool enabled = !tls.cert_pem.empty() || !tls.cert_file.empty() || !tls.key_pem.empty() ||
                       !tls.key_file.empty() || !tls.client_ca_pem.empty() || !tls.client_ca_file.empty() ||
                       !client_auth_text.empty();
  if (!enabled) return std::nullopt;
  if (tls.cert_pem.empty() && tls.cert_file.empty()) fail(path + ": missing one of cert or cert_file");
  if (tls.key_pem.empty() && tls.key_file.empty()) fail(path + ": missing one of key or key_file");
  if (!tls.cert_pem.empty() && !tls.cert_file.empty()) fail(path + ": give cert or cert_file, not both");
  if (!tls.key_pem.empty() && !tls.key_file.empty()) fail(path + ": give key or key_file, not both");
  if (!tls.client_ca_pem.empty() && !tls.client_ca_file.empty()) {
    fail(path + ": give client_ca or client_ca_file, not both");
  }
  const bool has_client_ca = !tls.client_ca_pem.empty() || !tls.client_ca_file.empty();
  if (has_client_ca && tls.client_auth == ClientAuth::kNoClientCert) {
    fail(path + ": client_ca_file is set but client_auth_type is NoClientCert");
  }
  if (allowed_sans_given && tls.client_auth != ClientAuth::kRequireAnyClientCert &&
      tls.client_auth != ClientAuth::kRequireAndVerifyClientCert) {
    fail(
        path +
        ": client_allowed_sans requires client_auth_type RequireAnyClientCert or RequireAndVerifyClientCert");
  }
  if (tls.min_version > tls.max_version) fail(path + ": min_version is above max_version");
  tls.cert_file = resolve(tls.cert_file, base_directory);
  tls.key_file = resolve(tls.key_file, base_directory);
  tls.client_ca_file = resolve(tls.client_ca_file, base_directory);
  return tls;
}

// The header names exporter-toolkit lets an operator set, and the values it accepts (empty: any).
struct AllowedHeader {
  std::string_view name;
  std::array<std::string_view, 2> values;
};
constexpr std::array<AllowedHeader, 5> kAllowedHeaders = {{
    {"Strict-Transport-Security", {}},
    {"X-Content-Type-Options", {"nosniff", ""}},
    {"X-Frame-Options", {"deny", "sameorigin"}},
    {"X-XSS-Protection", {}},
    {"Content-Security-Policy", {}},
}};

void parse_http(const YAML::Node& node, WebConfig& config) {
  const std::string path = "http_server_config";
  if (!present(node)) return;
  check_keys(node, path, {"http2", "headers"});
  // HTTP/2 is exporter-toolkit's default over TLS; rankstatd speaks HTTP/1.1 only, which every scraper
  // accepts, so the key is read and has no effect.
  if (present(node["http2"])) (void)boolean(node["http2"], path + ".http2");
  const YAML::Node headers = node["headers"];
  if (!present(headers)) return;
  if (!headers.IsMap()) fail(path + ".headers: expected a mapping" + where(headers));
  std::set<std::string> seen;
  for (const auto& entry : headers) {
    const std::string name = scalar(entry.first, path + ".headers");
    const std::string value = scalar(entry.second, path + ".headers." + name);
    const auto* allowed = std::find_if(kAllowedHeaders.begin(), kAllowedHeaders.end(),
                                       [&](const AllowedHeader& h) { return h.name == name; });
    if (allowed == kAllowedHeaders.end())
      fail(path + ".headers: HTTP header '" + name + "' can not be configured");
    if (!seen.insert(name).second) fail(path + ".headers: '" + name + "' given twice");
    const bool restricted = !allowed->values[0].empty();
    if (restricted && value != allowed->values[0] && value != allowed->values[1]) {
      fail(path + ".headers." + name + ": invalid value '" + value + "'");
    }
    if (value.find_first_of("\r\n") != std::string::npos)
      fail(path + ".headers." + name + ": line break in value");
    // exporter-toolkit sets the header even when blank; an empty header line says nothing, so skip it.
    if (!value.empty()) config.headers.emplace_back(name, value);
  }
}

// bcrypt's modular crypt format: $2a$, $2b$ or $2y$, a two-digit cost from 04 to 31, 53 characters of
// salt and hash.
bool is_bcrypt_hash(std::string_view hash) {
  if (hash.size() != 60 || hash[0] != '$' || hash[1] != '2' || hash[3] != '$' || hash[6] != '$') return false;
  if (hash[2] != 'a' && hash[2] != 'b' && hash[2] != 'y') return false;
  if (hash[4] < '0' || hash[4] > '3' || hash[5] < '0' || hash[5] > '9') return false;
  const int cost = (hash[4] - '0') * 10 + (hash[5] - '0');
  if (cost < 4 || cost > 31) return false;
  return std::all_of(hash.begin() + 7, hash.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '/';
  });
}

void parse_users(const YAML::Node& node, WebConfig& config) {
  const std::string path = "basic_auth_users";
  if (!present(node)) return;
  if (!node.IsMap()) fail(path + ": expected a mapping of user names to bcrypt hashes" + where(node));
  for (const auto& entry : node) {
    const std::string user = scalar(entry.first, path);
    // The hash is a secret: errors name the user, never the value.
    if (!entry.second.IsScalar() || !is_bcrypt_hash(entry.second.Scalar())) {
      fail(path + "." + user +
           R"msg(: not a bcrypt hash (make one with htpasswd -nBC 10 "" | tr -d ':\n'))msg");
    }
    if (!config.basic_auth_users.emplace(user, entry.second.Scalar()).second) {
      fail(path + ": user '" + user + "' given twice");
    }
  }
}

// Go's time.ParseDuration, as the exporter toolkit reads rate_limit.interval: the one duration grammar
// (rankstat/flags/duration.hpp) in nanoseconds.
std::chrono::nanoseconds go_duration(const std::string& text, const std::string& path) {
  const flags::ExactDurationParse parsed = flags::parse_go_duration(text);
  if (!parsed.value) fail(path + ": invalid duration: " + parsed.error);
  return *parsed.value;
}

void parse_rate_limit(const YAML::Node& node, WebConfig& config) {
  const std::string path = "rate_limit";
  if (!present(node)) return;
  check_keys(node, path, {"interval", "burst"});
  if (present(node["interval"])) {
    config.rate_limit.interval =
        go_duration(scalar(node["interval"], path + ".interval"), path + ".interval");
  }
  if (present(node["burst"])) {
    int burst = 0;
    if (!node["burst"].IsScalar() || !YAML::convert<int>::decode(node["burst"], burst) || burst < 0) {
      fail(path + ".burst: expected a non-negative integer");
    }
    config.rate_limit.burst = burst;
  }
}

std::string openssl_error() {
  std::string text;
  while (const unsigned long code = ERR_get_error()) {
    std::array<char, 256> buffer{};
    ERR_error_string_n(code, buffer.data(), buffer.size());
    if (!text.empty()) text += "; ";
    text += buffer.data();
  }
  return text.empty() ? "unknown OpenSSL error" : text;
}

// strerror's text without its shared buffer (strerror is not thread-safe); glibc's strerror_r.
std::string error_text(int error) {
  std::array<char, 256> buffer{};
  return ::strerror_r(error, buffer.data(), buffer.size());
}

std::string read_whole_file(const std::string& key, const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("cannot read " + key + " " + path + ": " + error_text(errno));
  std::ostringstream content;
  content << in.rdbuf();
  if (!in.good() && !in.eof()) fail("cannot read " + key + " " + path);
  return content.str();
}

// The PEM text of a setting given inline or as a file, and how to name it in errors.
std::pair<std::string, std::string> pem_of(const std::string& inline_pem, const std::string& file,
                                           const std::string& key) {
  if (!file.empty()) return {read_whole_file(key + "_file", file), key + "_file " + file};
  return {inline_pem, "tls_server_config." + key};
}

std::vector<std::string> subject_alt_names(X509* certificate) {
  std::vector<std::string> names;
  auto* general_names =
      static_cast<GENERAL_NAMES*>(X509_get_ext_d2i(certificate, NID_subject_alt_name, nullptr, nullptr));
  if (general_names == nullptr) return names;
  for (int i = 0; i < sk_GENERAL_NAME_num(general_names); ++i) {
    const GENERAL_NAME* name = sk_GENERAL_NAME_value(general_names, i);
    if (name->type == GEN_DNS || name->type == GEN_EMAIL || name->type == GEN_URI) {
      const ASN1_STRING* text = name->d.ia5;
      names.emplace_back(reinterpret_cast<const char*>(ASN1_STRING_get0_data(text)),
                         static_cast<std::size_t>(ASN1_STRING_length(text)));
    } else if (name->type == GEN_IPADD) {
      const ASN1_OCTET_STRING* address = name->d.iPAddress;
      std::array<char, INET6_ADDRSTRLEN> buffer{};
      const int length = ASN1_STRING_length(address);
      const int family = length == 4 ? AF_INET : length == 16 ? AF_INET6 : 0;
      if (family != 0 && inet_ntop(family, ASN1_STRING_get0_data(address), buffer.data(),
                                   static_cast<socklen_t>(buffer.size())) != nullptr) {
        names.emplace_back(buffer.data());
      }
    }
  }
  GENERAL_NAMES_free(general_names);
  return names;
}

}  // namespace

std::string_view client_auth_name(ClientAuth auth) {
  switch (auth) {
    case ClientAuth::kNoClientCert:
      return "NoClientCert";
    case ClientAuth::kRequestClientCert:
      return "RequestClientCert";
    case ClientAuth::kRequireAnyClientCert:
      return "RequireAnyClientCert";
    case ClientAuth::kVerifyClientCertIfGiven:
      return "VerifyClientCertIfGiven";
    case ClientAuth::kRequireAndVerifyClientCert:
      return "RequireAndVerifyClientCert";
  }
  return "?";
}

WebConfig parse_web_config(std::string_view yaml_text, const std::string& base_directory) {
  if (yaml_text.size() > kMaxWebConfigBytes) fail("web config is larger than 1 MiB");
  YAML::Node root;
  try {
    root = YAML::Load(std::string(yaml_text));
  } catch (const YAML::Exception& error) {
    fail(std::string("invalid YAML: ") + error.what());
  }
  WebConfig config;
  if (!present(root)) return config;  // an empty file: plain HTTP, no auth
  try {
    check_keys(root, "",
               {"tls_server_config", "http_server_config", "basic_auth_users", "basic_auth_excluded_paths",
                "rate_limit"});
    config.tls = parse_tls(root["tls_server_config"], base_directory);
    parse_http(root["http_server_config"], config);
    parse_users(root["basic_auth_users"], config);
    config.basic_auth_excluded_paths =
        string_list(root["basic_auth_excluded_paths"], "basic_auth_excluded_paths");
    parse_rate_limit(root["rate_limit"], config);
  } catch (const YAML::Exception& error) {
    fail(std::string("invalid web config: ") + error.what());
  }
  return config;
}

WebConfig load_web_config(const std::string& path) {
  std::error_code ec;
  const auto size = std::filesystem::file_size(path, ec);
  if (ec) fail("cannot read --web.config.file " + path + ": " + ec.message());
  if (size > kMaxWebConfigBytes) fail("--web.config.file " + path + " is larger than 1 MiB");
  const std::string text = read_whole_file("--web.config.file", path);
  WebConfig config;
  try {
    config = parse_web_config(text, std::filesystem::path(path).parent_path().string());
  } catch (const WebConfigError& error) {
    fail("--web.config.file " + path + ": " + error.what());
  }
  if (config.tls) (void)make_tls_context(*config.tls);  // every file readable, key matching certificate
  return config;
}

std::shared_ptr<asio::ssl::context> make_tls_context(const TlsServerConfig& tls) {
  ERR_clear_error();
  auto context = std::make_shared<asio::ssl::context>(asio::ssl::context::tls_server);
  SSL_CTX* native = context->native_handle();
  SSL_CTX_set_min_proto_version(native, tls.min_version);
  SSL_CTX_set_max_proto_version(native, tls.max_version);
  std::uint64_t options = SSL_OP_NO_COMPRESSION | SSL_OP_NO_RENEGOTIATION;
  if (tls.prefer_server_cipher_suites) options |= SSL_OP_CIPHER_SERVER_PREFERENCE;
  SSL_CTX_set_options(native, options);

  boost::system::error_code ec;
  const auto [cert_pem, cert_source] = pem_of(tls.cert_pem, tls.cert_file, "cert");
  context->use_certificate_chain(asio::buffer(cert_pem), ec);
  if (ec) fail("cannot use " + cert_source + " as a certificate: " + ec.message());
  const auto [key_pem, key_source] = pem_of(tls.key_pem, tls.key_file, "key");
  context->use_private_key(asio::buffer(key_pem), asio::ssl::context::pem, ec);
  if (ec) fail("cannot use " + key_source + " as a private key: " + ec.message());
  if (SSL_CTX_check_private_key(native) != 1) {
    fail(key_source + " does not belong to the certificate in " + cert_source);
  }
  if (!tls.openssl_ciphers.empty()) {
    std::string list;
    for (const std::string& cipher : tls.openssl_ciphers) list += (list.empty() ? "" : ":") + cipher;
    if (SSL_CTX_set_cipher_list(native, list.c_str()) != 1) {
      fail("tls_server_config.cipher_suites: OpenSSL accepts none of them: " + openssl_error());
    }
  }
  if (!tls.openssl_groups.empty()) {
    std::string list;
    for (const std::string& group : tls.openssl_groups) list += (list.empty() ? "" : ":") + group;
    if (SSL_CTX_set1_groups_list(native, list.c_str()) != 1) {
      fail("tls_server_config.curve_preferences: OpenSSL refuses them: " + openssl_error());
    }
  }

  if (tls.client_auth == ClientAuth::kNoClientCert) {
    context->set_verify_mode(asio::ssl::verify_none);
    return context;
  }
  if (!tls.client_ca_pem.empty() || !tls.client_ca_file.empty()) {
    const auto [ca_pem, ca_source] = pem_of(tls.client_ca_pem, tls.client_ca_file, "client_ca");
    context->add_certificate_authority(asio::buffer(ca_pem), ec);
    if (ec) fail("cannot use " + ca_source + " as client CA certificates: " + ec.message());
    // The CA names go into the certificate request, so that a client with several certificates (Go's
    // among them) picks one these CAs signed.
    STACK_OF(X509_NAME)* names = sk_X509_NAME_new_null();
    BIO* bio = BIO_new_mem_buf(ca_pem.data(), static_cast<int>(ca_pem.size()));
    while (X509* ca = PEM_read_bio_X509(bio, nullptr, nullptr, nullptr)) {
      if (X509_NAME* name = X509_NAME_dup(X509_get_subject_name(ca))) sk_X509_NAME_push(names, name);
      X509_free(ca);
    }
    BIO_free(bio);
    ERR_clear_error();  // the loop ends on "no start line"
    SSL_CTX_set_client_CA_list(native, names);
  } else {
    // No client CA: certificates are verified against the system's trust store, as Go does with an
    // empty ClientCAs pool.
    context->set_default_verify_paths(ec);
    if (ec) fail("cannot load the system's CA certificates: " + ec.message());
  }
  const bool required = tls.client_auth == ClientAuth::kRequireAnyClientCert ||
                        tls.client_auth == ClientAuth::kRequireAndVerifyClientCert;
  context->set_verify_mode(asio::ssl::verify_peer | (required ? asio::ssl::verify_fail_if_no_peer_cert : 0));
  // Request and RequireAny take whatever certificate is sent, as Go does; the others need a chain to
  // client_ca_file. client_allowed_sans then checks the client's own certificate (depth 0).
  const bool chain_checked = tls.client_auth == ClientAuth::kVerifyClientCertIfGiven ||
                             tls.client_auth == ClientAuth::kRequireAndVerifyClientCert;
  context->set_verify_callback([chain_checked, allowed = tls.client_allowed_sans](
                                   bool preverified, asio::ssl::verify_context& verify) {
    if (chain_checked && !preverified) return false;
    X509_STORE_CTX* store = verify.native_handle();
    if (allowed.empty() || X509_STORE_CTX_get_error_depth(store) != 0) return true;
    X509* certificate = X509_STORE_CTX_get_current_cert(store);
    if (certificate == nullptr) return false;
    const std::vector<std::string> names = subject_alt_names(certificate);
    return std::any_of(names.begin(), names.end(), [&](const std::string& name) {
      return std::find(allowed.begin(), allowed.end(), name) != allowed.end();
    });
  });
  return context;
}

}  // namespace rankstat::http
