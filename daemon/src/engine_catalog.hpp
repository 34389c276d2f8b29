// What the daemon knows about engine metric families beyond what segments carry: their help text.
// (Types, modes, labels and buckets travel in the segments; help text would only bloat them.)
#pragma once

#include <string_view>

namespace rankstat {

// Help text for an engine family, in our own words; a generic text for families not in the catalog.
// Never contains a backslash or a newline (prometheus-cpp does not escape HELP).
std::string_view engine_help(std::string_view family);

}  // namespace rankstat
