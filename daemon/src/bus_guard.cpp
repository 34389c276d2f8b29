#include "bus_guard.hpp"

#include <signal.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <mutex>

namespace rankstat {

namespace {

// Initial-exec TLS: the handler reads it without calling into the dynamic loader (the daemon is an
// executable, so its thread-locals are in the static TLS block anyway; this makes it explicit).
__attribute__((tls_model("initial-exec"))) constinit thread_local BusGuard* tls_innermost = nullptr;

std::atomic<std::uint64_t> g_absorbed{0};
std::uintptr_t g_page_bytes = 4096;

}  // namespace

struct BusGuardAccess {
  static BusGuard*& innermost() { return tls_innermost; }
  static std::uintptr_t begin(const BusGuard& g) { return g.begin_; }
  static std::uintptr_t end(const BusGuard& g) { return g.end_; }
  static BusGuard* outer(const BusGuard& g) { return g.outer_; }
  static void mark(BusGuard& g) { g.faulted_ = 1; }
};

namespace {

void default_and_reraise() {
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  sigaction(SIGBUS, &dfl, nullptr);
  // A fault re-executes the instruction on return and dies with the default action; a SIGBUS sent with
  // kill(2) must be raised again (it is blocked while this handler runs and delivered on return).
  raise(SIGBUS);
}

// Only async-signal-safe operations: thread-local reads, arithmetic, one raw mmap system call (no libc
// or sanitizer interceptor in between), sigaction and raise.
void on_sigbus(int, siginfo_t* info, void*) {
  const auto address = reinterpret_cast<std::uintptr_t>(info->si_addr);
  if (info->si_code != BUS_ADRERR) {
    default_and_reraise();
    return;
  }
  for (BusGuard* g = BusGuardAccess::innermost(); g != nullptr; g = BusGuardAccess::outer(*g)) {
    const std::uintptr_t begin = BusGuardAccess::begin(*g);
    const std::uintptr_t end = BusGuardAccess::end(*g);
    const bool everywhere = begin == 0 && end == 0;
    if (!everywhere && (address < begin || address >= end)) continue;
    const std::uintptr_t page = address & ~(g_page_bytes - 1);
    std::uintptr_t stop = everywhere ? page + g_page_bytes : (end + g_page_bytes - 1) & ~(g_page_bytes - 1);
    if (stop <= page) stop = page + g_page_bytes;
    const long mapped = ::syscall(SYS_mmap, page, stop - page, PROT_READ | PROT_WRITE,
                                  MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
    if (mapped == -1) break;  // cannot patch: fall through to the default action
    BusGuardAccess::mark(*g);
    g_absorbed.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  default_and_reraise();
}

}  // namespace

bool install_bus_guard() noexcept {
  static std::once_flag once;
  static bool installed = false;
  std::call_once(once, [] {
    const long page = sysconf(_SC_PAGESIZE);
    if (page > 0) g_page_bytes = static_cast<std::uintptr_t>(page);
    struct sigaction action {};
    action.sa_sigaction = on_sigbus;
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_SIGINFO;
    installed = sigaction(SIGBUS, &action, nullptr) == 0;
  });
  return installed;
}

BusGuard::BusGuard(const void* base, std::uint64_t bytes) noexcept
    : begin_(reinterpret_cast<std::uintptr_t>(base)),
      end_(base == nullptr ? 0 : reinterpret_cast<std::uintptr_t>(base) + bytes),
      outer_(tls_innermost) {
  // The handler runs on this thread, between two instructions of this thread: a compiler barrier is
  // enough to make the scope visible to it before the guarded reads.
  tls_innermost = this;
  std::atomic_signal_fence(std::memory_order_seq_cst);
}

BusGuard::~BusGuard() {
  std::atomic_signal_fence(std::memory_order_seq_cst);
  tls_innermost = outer_;
}

std::uint64_t bus_errors_absorbed() noexcept {
  return g_absorbed.load(std::memory_order_relaxed);
}

}  // namespace rankstat
