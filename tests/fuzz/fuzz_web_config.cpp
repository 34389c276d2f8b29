// The --web.config.file parser over arbitrary text: it may refuse (WebConfigError), never crash, hang or
// throw anything else, and what it accepts must hold the invariants the daemon relies on.
#include <string_view>

#include "fuzz_common.hpp"
#include "http/web_config.hpp"

namespace http = rankstat::http;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  http::WebConfig config;
  try {
    config = http::parse_web_config(text, "/etc/rankstat");
  } catch (const http::WebConfigError& error) {
    RANKSTAT_FUZZ_EXPECT(error.what()[0] != '\0');
    return 0;
  }
  if (config.tls) {
    const http::TlsServerConfig& tls = *config.tls;
    RANKSTAT_FUZZ_EXPECT(!tls.cert_pem.empty() || !tls.cert_file.empty());
    RANKSTAT_FUZZ_EXPECT(!tls.key_pem.empty() || !tls.key_file.empty());
    RANKSTAT_FUZZ_EXPECT(tls.min_version <= tls.max_version);
    RANKSTAT_FUZZ_EXPECT(tls.client_allowed_sans.empty() ||
                         tls.client_auth == http::ClientAuth::kRequireAnyClientCert ||
                         tls.client_auth == http::ClientAuth::kRequireAndVerifyClientCert);
    RANKSTAT_FUZZ_EXPECT(tls.cert_file.empty() || tls.cert_file.front() == '/');
  }
  for (const auto& [name, value] : config.headers) {
    RANKSTAT_FUZZ_EXPECT(!value.empty() && value.find_first_of("\r\n") == std::string::npos);
    RANKSTAT_FUZZ_EXPECT(!name.empty());
  }
  for (const auto& [user, hash] : config.basic_auth_users) RANKSTAT_FUZZ_EXPECT(hash.size() == 60);
  RANKSTAT_FUZZ_EXPECT(config.rate_limit.interval.count() >= 0 && config.rate_limit.burst >= 0);
  return 0;
}
