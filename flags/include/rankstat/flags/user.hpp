// A user as flags name one (--shm.instance-owner, --allowed-uids): a user name or a numeric uid.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace rankstat::flags {

// The uid of `text`: all digits (at most 10, below 2^32 - 1, which is "no user") is a uid as given;
// anything else is looked up as a user name (getpwnam_r, thread-safe). nullopt if it is neither.
std::optional<std::uint32_t> resolve_uid(const std::string& text);

}  // namespace rankstat::flags
