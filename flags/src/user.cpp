#include "rankstat/flags/user.hpp"

#include <pwd.h>

#include <vector>

namespace rankstat::flags {

std::optional<std::uint32_t> resolve_uid(const std::string& text) {
  if (!text.empty() && text.find_first_not_of("0123456789") == std::string::npos && text.size() <= 10) {
    const unsigned long long uid = std::stoull(text);
    if (uid <= 0xFFFFFFFEull) return static_cast<std::uint32_t>(uid);
    return std::nullopt;
  }
  if (text.empty()) return std::nullopt;
  passwd entry{};
  passwd* found = nullptr;
  std::vector<char> buffer(16384);
  if (getpwnam_r(text.c_str(), &entry, buffer.data(), buffer.size(), &found) != 0 || found == nullptr) {
    return std::nullopt;
  }
  return static_cast<std::uint32_t>(found->pw_uid);
}

}  // namespace rankstat::flags
