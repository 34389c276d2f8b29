#pragma once

// HTTP basic authentication against bcrypt hashes (exporter-toolkit's basic_auth_users).
//
// bcrypt is slow on purpose (tens of milliseconds at cost 10, on the daemon's io thread), so the answer
// for a (user, hash, password) triple is remembered as a keyed digest, accepted or refused: a scraper
// sending the same credentials every second, right or wrong, pays the bcrypt cost once. The caches hold no
// password, only HMAC-SHA-256 digests under a key drawn at start; a reloaded config starts new ones.
//
// Threading contract: not thread-safe. One BasicAuth belongs to one thread (rankstatd's io thread).

#include <array>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <string_view>

namespace rankstat::http {

// True when `password` hashes to `bcrypt_hash` (libxcrypt's crypt_rn with the hash as setting). The
// comparison runs in constant time.
bool bcrypt_matches(std::string_view password, const std::string& bcrypt_hash);

enum class AuthOutcome {
  kAccepted,
  kMissing,   // no (or no usable) Basic credentials in the request
  kRejected,  // unknown user or wrong password
};

class BasicAuth {
 public:
  // `users`: user name -> bcrypt hash. An empty map accepts every request.
  explicit BasicAuth(std::map<std::string, std::string> users = {});

  [[nodiscard]] bool enabled() const { return !users_.empty(); }
  // Checks an Authorization header value ("" when the request had none).
  AuthOutcome check(std::string_view authorization);
  // bcrypt verifications run so far (cache misses), for tests and benchmarks.
  [[nodiscard]] std::uint64_t bcrypt_runs() const { return bcrypt_runs_; }

  static constexpr std::string_view kChallenge = "Basic";  // the WWW-Authenticate value, as exporters send

 private:
  using Digest = std::array<unsigned char, 32>;
  Digest cache_key(std::string_view user, const std::string& hash, std::string_view password) const;

  std::map<std::string, std::string> users_;
  std::array<unsigned char, 32> cache_secret_{};
  std::set<Digest> verified_;  // bounded: each cleared when it reaches kMaxCachedCredentials
  std::set<Digest> refused_;
  std::uint64_t bcrypt_runs_ = 0;
  static constexpr std::size_t kMaxCachedCredentials = 256;
};

// Decodes RFC 4648 base64 (padding optional); false on any other character.
bool decode_base64(std::string_view text, std::string& out);

}  // namespace rankstat::http
