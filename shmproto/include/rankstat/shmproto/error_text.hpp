// Texts for error messages and notes: a quoted untrusted string, an errno, a user.
#pragma once

#include <pwd.h>

#include <array>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace rankstat::shm {

// `text` in single quotes for an error message, bytes outside printable ASCII as \xNN.
inline std::string quoted_for_message(std::string_view text) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out = "'";
  for (const char c : text.substr(0, 80)) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte >= 0x20 && byte < 0x7f && c != '\\') {
      out += c;
    } else {
      out.append("\\x").append(1, kHex[byte >> 4]).append(1, kHex[byte & 15]);
    }
  }
  if (text.size() > 80) out += "...";
  return out + "'";
}

// The two strerror_r flavours: GNU returns the text (maybe not in the buffer), XSI fills the buffer.
inline std::string strerror_r_text(const char* gnu_text, const char* /*buffer*/, int /*error*/) {
  return gnu_text;
}
inline std::string strerror_r_text(int xsi_result, const char* buffer, int error) {
  return xsi_result == 0 ? std::string(buffer) : "errno " + std::to_string(error);
}

// strerror's text without its shared buffer: strerror is not thread-safe, and engines and the daemon
// run threads.
inline std::string errno_text(int error) {
  std::array<char, 256> buffer{};
  return strerror_r_text(::strerror_r(error, buffer.data(), buffer.size()), buffer.data(), error);
}

// "uid N (name)", or "uid N" when the user has no passwd entry.
inline std::string describe_user(std::uint32_t uid) {
  std::string out = "uid " + std::to_string(uid);
  passwd entry{};
  passwd* found = nullptr;
  char buffer[4096];
  if (getpwuid_r(static_cast<uid_t>(uid), &entry, buffer, sizeof buffer, &found) == 0 && found != nullptr)
    out += std::string(" (") + found->pw_name + ")";
  return out;
}

}  // namespace rankstat::shm
