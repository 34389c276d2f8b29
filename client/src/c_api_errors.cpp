// The C ABI's error reporting: the status codes pinned to Status, and the thread-local last error.
//
// Error messages live in thread-local storage. The hot-path failures (ring full, oversize, closed, a
// bad id) only store a pointer to static text, so a dropped record costs no allocation; the
// std::string is touched only by the cold paths (open, registration), which is also when its
// thread-exit destructor gets registered.

#include <new>
#include <string>
#include <string_view>

#include "c_api_internal.hpp"

namespace {

using rankstat::Status;

// nullptr means "the message is in tls_error_message". Constant-initialised and trivially destructible,
// so touching it on the hot path neither allocates nor registers a destructor.
thread_local const char* tls_error_text = "";
thread_local std::string tls_error_message;

static_assert(RANKSTAT_OK == static_cast<int>(Status::kOk));
static_assert(RANKSTAT_ERR_INVALID_ARGUMENT == static_cast<int>(Status::kInvalidArgument));
static_assert(RANKSTAT_ERR_NO_SPACE == static_cast<int>(Status::kNoSpace));
static_assert(RANKSTAT_ERR_PERMISSION == static_cast<int>(Status::kPermission));
static_assert(RANKSTAT_ERR_IO == static_cast<int>(Status::kIo));
static_assert(RANKSTAT_ERR_RING_FULL == static_cast<int>(Status::kRingFull));
static_assert(RANKSTAT_ERR_OVERSIZE == static_cast<int>(Status::kOversize));
static_assert(RANKSTAT_ERR_CLOSED == static_cast<int>(Status::kClosed));
static_assert(RANKSTAT_ERR_REGISTRY_FULL == static_cast<int>(Status::kRegistryFull));

}  // namespace

namespace rankstat::c_api {

int fail(Status status, const char* text) {
  tls_error_text = text != nullptr ? text : status_message(status);
  return static_cast<int>(status);
}

int fail_with(Status status, std::string_view message) {
  try {
    tls_error_message.assign(message);
    tls_error_text = nullptr;
  } catch (...) {
    tls_error_text = status_message(status);
  }
  return static_cast<int>(status);
}

int internal_error() {
  try {
    throw;
  } catch (const std::bad_alloc&) {
    return fail(Status::kIo, "out of memory");
  } catch (...) {
    return fail(Status::kIo, "internal error");
  }
}

}  // namespace rankstat::c_api

extern "C" {

const char* rankstat_last_error(void) {
  return tls_error_text != nullptr ? tls_error_text : tls_error_message.c_str();
}

}  // extern "C"
