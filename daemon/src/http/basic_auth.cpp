#include "http/basic_auth.hpp"

#include <crypt.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <cstring>
#include <memory>
#include <stdexcept>

namespace rankstat::http {

namespace {

// A bcrypt hash of a random string nobody knows: an unknown user is checked against it, so that the
// response time does not tell which user names exist.
constexpr const char* kUnknownUserHash = "$2b$10$letBqIMb2xzMC08wuVp81uMGPSB/6ybL7XgHBiKmJF3Sw/Y76ox5a";

int base64_value(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}

bool starts_with_ignoring_case(std::string_view text, std::string_view prefix) {
  if (text.size() < prefix.size()) return false;
  for (std::size_t i = 0; i < prefix.size(); ++i) {
    const auto lower = [](char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; };
    if (lower(text[i]) != lower(prefix[i])) return false;
  }
  return true;
}

}  // namespace

bool decode_base64(std::string_view text, std::string& out) {
  out.clear();
  while (!text.empty() && text.back() == '=') text.remove_suffix(1);
  std::uint32_t accumulator = 0;
  int bits = 0;
  for (const char c : text) {
    const int value = base64_value(c);
    if (value < 0) return false;
    accumulator = (accumulator << 6) | static_cast<std::uint32_t>(value);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((accumulator >> bits) & 0xFF));
    }
  }
  return bits < 6;  // a single leftover character cannot encode a byte
}

bool bcrypt_matches(std::string_view password, const std::string& bcrypt_hash) {
  // crypt_rn reads a NUL-terminated phrase: a password with a NUL in it cannot match anything.
  if (password.find('\0') != std::string_view::npos) return false;
  const std::string phrase(password);
  auto data = std::make_unique<crypt_data>();  // ~32 KiB of scratch space: not on the io thread's stack
  const char* const hashed = crypt_rn(phrase.c_str(), bcrypt_hash.c_str(), data.get(), sizeof(crypt_data));
  const bool matches = hashed != nullptr && std::strlen(hashed) == bcrypt_hash.size() &&
                       CRYPTO_memcmp(hashed, bcrypt_hash.data(), bcrypt_hash.size()) == 0;
  OPENSSL_cleanse(data.get(), sizeof(crypt_data));
  return matches;
}

BasicAuth::BasicAuth(std::map<std::string, std::string> users) : users_(std::move(users)) {
  if (RAND_bytes(cache_secret_.data(), static_cast<int>(cache_secret_.size())) != 1) {
    throw std::runtime_error("cannot draw a random key for the basic-auth cache");
  }
}

BasicAuth::Digest BasicAuth::cache_key(std::string_view user, const std::string& hash,
                                       std::string_view password) const {
  // Length-prefixed fields, so that ("ab", "c") and ("a", "bc") never share a key.
  std::string message;
  for (const std::string_view field : {user, std::string_view(hash), password}) {
    const auto length = static_cast<std::uint32_t>(field.size());
    message.append(reinterpret_cast<const char*>(&length), sizeof length);
    message.append(field);
  }
  Digest digest{};
  unsigned int digest_length = 0;
  HMAC(EVP_sha256(), cache_secret_.data(), static_cast<int>(cache_secret_.size()),
       reinterpret_cast<const unsigned char*>(message.data()), message.size(), digest.data(), &digest_length);
  OPENSSL_cleanse(message.data(), message.size());
  return digest;
}

AuthOutcome BasicAuth::check(std::string_view authorization) {
  if (users_.empty()) return AuthOutcome::kAccepted;
  constexpr std::string_view kScheme = "basic ";
  if (!starts_with_ignoring_case(authorization, kScheme)) return AuthOutcome::kMissing;
  std::string_view encoded = authorization.substr(kScheme.size());
  while (!encoded.empty() && (encoded.front() == ' ' || encoded.front() == '\t')) encoded.remove_prefix(1);
  while (!encoded.empty() && (encoded.back() == ' ' || encoded.back() == '\t')) encoded.remove_suffix(1);
  std::string credentials;
  if (!decode_base64(encoded, credentials)) return AuthOutcome::kMissing;
  const auto colon = credentials.find(':');
  if (colon == std::string::npos) {
    OPENSSL_cleanse(credentials.data(), credentials.size());
    return AuthOutcome::kMissing;
  }
  const std::string_view user = std::string_view(credentials).substr(0, colon);
  const std::string_view password = std::string_view(credentials).substr(colon + 1);
  const auto known = users_.find(std::string(user));
  const std::string& hash = known != users_.end() ? known->second : kUnknownUserHash;
  const Digest key = cache_key(user, hash, password);
  bool accepted = false;
  if (verified_.contains(key)) {
    accepted = true;
  } else if (!refused_.contains(key)) {
    // The same (user, hash, password) always gives the same answer, so both answers are remembered: a
    // scraper configured with a wrong password, retrying every few seconds, then stalls the io thread
    // for one bcrypt, not one per scrape. Varied passwords still cost one each (`rate_limit` bounds that).
    ++bcrypt_runs_;
    accepted = bcrypt_matches(password, hash) && known != users_.end();  // unknown users: same cost, never in
    std::set<Digest>& remembered = accepted ? verified_ : refused_;
    if (remembered.size() >= kMaxCachedCredentials) remembered.clear();
    remembered.insert(key);
  }
  OPENSSL_cleanse(credentials.data(), credentials.size());
  return accepted ? AuthOutcome::kAccepted : AuthOutcome::kRejected;
}

}  // namespace rankstat::http
