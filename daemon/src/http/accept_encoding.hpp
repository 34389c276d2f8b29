#pragma once

// Accept-Encoding negotiation (RFC 9110 section 12.5.3): whether a response may go out gzipped.
// A pure function of the header value; safe from any thread.

#include <string_view>

namespace rankstat::http {

// True when an Accept-Encoding value allows a gzip response: "gzip" (or its alias "x-gzip") or,
// failing an explicit entry, "*" is listed with a q-value above zero. Codings and parameter names
// are case-insensitive and optional whitespace is ignored. An explicit "gzip;q=0" anywhere refuses
// gzip even when "*" allows it; elements with a malformed q-value are ignored; an empty header
// means identity only.
bool accepts_gzip(std::string_view accept_encoding);

}  // namespace rankstat::http
