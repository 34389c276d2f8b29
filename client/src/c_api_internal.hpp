// What the C ABI's translation units share: the handle behind rankstat_reporter and the error reporting
// every exported function ends in (c_api_errors.cpp). Not installed; hidden like everything but rankstat.h.
#pragma once

#include <cstdint>
#include <string_view>

// Built with -fvisibility=hidden: only the declarations of the public header are exported.
#pragma GCC visibility push(default)
#include "rankstat/rankstat.h"
#pragma GCC visibility pop

#include "rankstat/reporter.hpp"
#include "rankstat/shmproto/label_lists.hpp"

struct rankstat_reporter {
  rankstat::Reporter reporter;
  // Reporter::identity_labels() at open: rankstat_identity_label hands out pointers into it.
  rankstat::shm::LabelPairs identity_labels;
};

namespace rankstat::c_api {

// Hot-path failure: no allocation, the text is static (`text`, else the status's message). Returns the
// status as the C ABI's code.
int fail(Status status, const char* text = nullptr);

// Cold-path failure with a message of its own. Falls back to static text if the copy cannot allocate.
int fail_with(Status status, std::string_view message);

inline int result(Status status) {
  return status == Status::kOk ? RANKSTAT_OK : fail(status);
}

// Called from the catch-all of every function: whatever escaped is reported, never propagated.
int internal_error();

// NUL-terminated label names and values from C arrays; false if an array or an entry is NULL.
bool read_labels(std::uint32_t count, const char* const* names, const char* const* values,
                 rankstat::shm::LabelPairs& out);

}  // namespace rankstat::c_api
