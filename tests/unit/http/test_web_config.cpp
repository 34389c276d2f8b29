// The exporter-toolkit web config parser and basic-auth checker, without sockets: keys, defaults and
// refusals as exporter-toolkit has them, bcrypt through libxcrypt, the verification cache.
#include <openssl/ssl.h>
#include <catch2/catch.hpp>

#include "http/basic_auth.hpp"
#include "http/web_config.hpp"

using namespace rankstat::http;

namespace {

// A bcrypt hash (cost 4, to keep the tests quick) of "hunter2".
constexpr const char* kHunter2Hash = "$2b$04$SvywQQ9ZTHeUmVbGxrMk2.wbK.jCMF0JmrQVEBgH8e.tLQd0b1Cvi";

std::string error_of(const std::string& yaml) {
  try {
    (void)parse_web_config(yaml, "/etc/rankstat");
  } catch (const WebConfigError& error) {
    return error.what();
  }
  return "";
}

}  // namespace

TEST_CASE("a web config with every exporter-toolkit key parses with their meanings") {
  const WebConfig config = parse_web_config(R"(
tls_server_config:
  cert_file: server.crt
  key_file: /etc/keys/server.key
  client_auth_type: RequireAndVerifyClientCert
  client_ca_file: clients.pem
  min_version: TLS13
  max_version: TLS13
  cipher_suites: [TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256, TLS_AES_128_GCM_SHA256]
  curve_preferences: [X25519, CurveP256]
  prefer_server_cipher_suites: false
  client_allowed_sans: [prometheus.example, 10.0.0.1]
http_server_config:
  http2: false
  headers:
    X-Frame-Options: sameorigin
    Strict-Transport-Security: max-age=31536000
basic_auth_users:
  prometheus: $2b$04$SvywQQ9ZTHeUmVbGxrMk2.wbK.jCMF0JmrQVEBgH8e.tLQd0b1Cvi
rate_limit:
  interval: 1m30s
  burst: 5
)",
                                            "/etc/rankstat");
  REQUIRE(config.tls);
  const TlsServerConfig& tls = *config.tls;
  CHECK(tls.cert_file == "/etc/rankstat/server.crt");  // relative to the config file, as exporter-toolkit
  CHECK(tls.key_file == "/etc/keys/server.key");
  CHECK(tls.client_ca_file == "/etc/rankstat/clients.pem");
  CHECK(tls.client_auth == ClientAuth::kRequireAndVerifyClientCert);
  CHECK(tls.min_version == TLS1_3_VERSION);
  CHECK(tls.max_version == TLS1_3_VERSION);
  CHECK(tls.openssl_ciphers == std::vector<std::string>{"ECDHE-RSA-AES128-GCM-SHA256"});  // TLS 1.3: fixed
  CHECK(tls.openssl_groups == std::vector<std::string>{"X25519", "P-256"});
  CHECK_FALSE(tls.prefer_server_cipher_suites);
  CHECK(tls.client_allowed_sans == std::vector<std::string>{"prometheus.example", "10.0.0.1"});
  CHECK(config.headers ==
        std::vector<std::pair<std::string, std::string>>{{"X-Frame-Options", "sameorigin"},
                                                         {"Strict-Transport-Security", "max-age=31536000"}});
  CHECK(config.basic_auth_users.at("prometheus") == kHunter2Hash);
  CHECK(config.rate_limit.interval == std::chrono::seconds(90));
  CHECK(config.rate_limit.burst == 5);
}

TEST_CASE(
    "defaults are exporter-toolkit's: TLS 1.2 to 1.3, no client certificate, plain HTTP without TLS keys") {
  const WebConfig tls = parse_web_config("tls_server_config:\n  cert_file: a.crt\n  key_file: a.key\n", "");
  REQUIRE(tls.tls);
  CHECK(tls.tls->min_version == TLS1_2_VERSION);
  CHECK(tls.tls->max_version == TLS1_3_VERSION);
  CHECK(tls.tls->client_auth == ClientAuth::kNoClientCert);
  CHECK(tls.tls->prefer_server_cipher_suites);
  CHECK_FALSE(parse_web_config("", "").tls);
  CHECK_FALSE(parse_web_config("tls_server_config:\n  min_version: TLS13\n", "").tls);
  CHECK(parse_web_config("basic_auth_users:\n", "").basic_auth_users.empty());
}

TEST_CASE("a web config is refused with an error naming the key at fault") {
  CHECK(error_of("tls_server_confg:\n  cert_file: a\n").find("unknown key 'tls_server_confg'") !=
        std::string::npos);
  CHECK(error_of("tls_server_config:\n  cert_file: a\n  key_file: b\n  client_auth: x\n")
            .find("tls_server_config: unknown key 'client_auth'") != std::string::npos);
  CHECK(error_of("tls_server_config:\n  cert_file: a\n").find("missing one of key or key_file") !=
        std::string::npos);
  CHECK(error_of("tls_server_config:\n  cert_file: a\n  key_file: b\n  client_auth_type: Maybe\n")
            .find("invalid client_auth_type 'Maybe'") != std::string::npos);
  CHECK(error_of("tls_server_config:\n  cert_file: a\n  key_file: b\n  client_ca_file: c\n")
            .find("client_auth_type is NoClientCert") != std::string::npos);
  CHECK(error_of(
            "tls_server_config:\n  cert_file: a\n  key_file: b\n  client_auth_type: VerifyClientCertIfGiven\n"
            "  client_ca_file: c\n  client_allowed_sans: [x]\n")
            .find("client_allowed_sans requires") != std::string::npos);
  CHECK(error_of("tls_server_config:\n  cert_file: a\n  key_file: b\n  min_version: TLS14\n")
            .find("unknown TLS version 'TLS14'") != std::string::npos);
  CHECK(error_of("tls_server_config:\n  cert_file: a\n  key_file: b\n  cipher_suites: [TLS_RC4]\n")
            .find("unknown cipher 'TLS_RC4'") != std::string::npos);
  CHECK(error_of("tls_server_config:\n  cert_file: a\n  key_file: b\n  curve_preferences: [P256]\n")
            .find("unknown curve 'P256'") != std::string::npos);
  CHECK(error_of("http_server_config:\n  headers:\n    Server: x\n").find("'Server' can not be configured") !=
        std::string::npos);
  CHECK(error_of("http_server_config:\n  headers:\n    X-Frame-Options: allow\n")
            .find("invalid value 'allow'") != std::string::npos);
  CHECK(error_of("basic_auth_users:\n  u: secret\n").find("basic_auth_users.u: not a bcrypt hash") !=
        std::string::npos);
  CHECK(error_of("basic_auth_users:\n  u: secret\n").find("secret") == std::string::npos);  // never echoed
  CHECK(error_of("rate_limit:\n  interval: soon\n").find("rate_limit.interval: invalid duration") !=
        std::string::npos);
  CHECK(error_of("tls_server_config: [\n").find("invalid YAML") != std::string::npos);
  CHECK(error_of("tls_server_config:\n  cert_file: a\n  cert_file: b\n  key_file: c\n").find("given twice") !=
        std::string::npos);
}

TEST_CASE("rate_limit.interval reads Go's duration units and refuses malformed durations") {
  CHECK(parse_web_config("rate_limit:\n  interval: 1h30m\n", "").rate_limit.interval ==
        std::chrono::minutes(90));
  CHECK(parse_web_config("rate_limit:\n  interval: 250us\n", "").rate_limit.interval ==
        std::chrono::microseconds(250));
  CHECK(parse_web_config("rate_limit:\n  interval: 0\n", "").rate_limit.interval ==
        std::chrono::nanoseconds(0));
  CHECK(error_of("rate_limit:\n  interval: 1.2.3s\n") ==
        "rate_limit.interval: invalid duration: '1.2.3s' is not a duration (write e.g. 500ms, 2s, 1m30s)");
  CHECK(error_of("rate_limit:\n  interval: 5\n").find("'5' has no unit") != std::string::npos);
  CHECK(error_of("rate_limit:\n  interval: -1s\n").find("cannot be negative") != std::string::npos);
}

TEST_CASE("a TLS context names the unreadable file in its error") {
  TlsServerConfig tls;
  tls.cert_file = "/nonexistent/server.crt";
  tls.key_file = "/nonexistent/server.key";
  try {
    (void)make_tls_context(tls);
    FAIL("a missing certificate was accepted");
  } catch (const WebConfigError& error) {
    CHECK(std::string(error.what()).find("cert_file /nonexistent/server.crt") != std::string::npos);
  }
}

TEST_CASE("bcrypt hashes from libxcrypt verify the right password only") {
  CHECK(bcrypt_matches("hunter2", kHunter2Hash));
  CHECK_FALSE(bcrypt_matches("hunter3", kHunter2Hash));
  CHECK_FALSE(bcrypt_matches("", kHunter2Hash));
  CHECK_FALSE(bcrypt_matches(std::string_view("hunter2\0x", 9), kHunter2Hash));
  CHECK_FALSE(bcrypt_matches("hunter2", "$2b$04$short"));
}

TEST_CASE("basic auth accepts the right user and password, caches the verification and refuses the rest") {
  BasicAuth auth(std::map<std::string, std::string>{{"prometheus", kHunter2Hash}});
  REQUIRE(auth.enabled());
  // "prometheus:hunter2" and "prometheus:wrong" in base64
  CHECK(auth.check("Basic cHJvbWV0aGV1czpodW50ZXIy") == AuthOutcome::kAccepted);
  CHECK(auth.bcrypt_runs() == 1);
  CHECK(auth.check("basic  cHJvbWV0aGV1czpodW50ZXIy ") == AuthOutcome::kAccepted);
  CHECK(auth.bcrypt_runs() == 1);  // cached
  CHECK(auth.check("Basic cHJvbWV0aGV1czp3cm9uZw==") == AuthOutcome::kRejected);
  CHECK(auth.check("Basic cHJvbWV0aGV1czp3cm9uZw==") == AuthOutcome::kRejected);
  CHECK(auth.bcrypt_runs() == 2);  // a repeated wrong password costs one bcrypt, not one per request
  CHECK(auth.check("Basic cHJvbWV0aGV1czpodW50ZXIz") == AuthOutcome::kRejected);  // prometheus:hunter3
  CHECK(auth.bcrypt_runs() == 3);
  CHECK(auth.check("Basic bm9ib2R5Omh1bnRlcjI=") == AuthOutcome::kRejected);  // nobody:hunter2
  CHECK(auth.check("Basic bm9ib2R5Omh1bnRlcjI=") == AuthOutcome::kRejected);
  CHECK(auth.bcrypt_runs() == 4);
  CHECK(auth.check("Basic cHJvbWV0aGV1czpodW50ZXIy") == AuthOutcome::kAccepted);  // still the right one
  CHECK(auth.check("") == AuthOutcome::kMissing);
  CHECK(auth.check("Bearer abc") == AuthOutcome::kMissing);
  CHECK(auth.check("Basic !!!") == AuthOutcome::kMissing);
  CHECK(auth.check("Basic bm9jb2xvbg==") == AuthOutcome::kMissing);  // "nocolon"
  CHECK(BasicAuth().check("") == AuthOutcome::kAccepted);
}

TEST_CASE("base64 decoding takes padded and unpadded text and refuses other characters") {
  std::string out;
  CHECK(decode_base64("YWI=", out));
  CHECK(out == "ab");
  CHECK(decode_base64("YWI", out));
  CHECK(out == "ab");
  CHECK(decode_base64("", out));
  CHECK(out.empty());
  CHECK_FALSE(decode_base64("Y", out));
  CHECK_FALSE(decode_base64("YW I=", out));
}
