// SIGBUS containment for reads of mapped segment memory.
//
// A reader maps files that other processes own. Anyone with write access to such a file can ftruncate
// it while it is mapped; touching a page that is now beyond the end of the file raises SIGBUS, which by
// default kills the process. A reader must survive that: the daemon keeps serving everyone else, the
// CLI's --direct mode keeps showing the other ranks. So every read (and, in the daemon, the few writes:
// `head`, the consumer heartbeat) of a segment's mapping runs inside a BusGuard scope naming the
// mapping:
//
//   BusGuard guard(mapping_base, mapping_bytes);
//   ... read the segment ...
//   if (guard.faulted()) quarantine the segment; never read it again
//
// How a fault is absorbed (no longjmp): the process-wide SIGBUS handler checks that the signal is a
// real bus error (si_code BUS_ADRERR) at an address inside the innermost active scope of the faulting
// thread, maps anonymous zero pages over the vanished part of that mapping (MAP_FIXED, from the
// faulting page to the end of the scope's range) with a raw mmap system call, marks the scope faulted
// and returns. The faulting instruction re-executes and now reads zeros. Every reader of segment
// memory already treats its content as hostile (all indices and lengths are bounds-checked), so zeros
// are just one more kind of garbage; the caller then sees faulted() and quarantines the segment.
//
// Why not sigsetjmp/siglongjmp: jumping out of the handler would skip the frames between the guard and
// the faulting read. Those frames hold std::string / std::vector locals (descriptor parsing), whose
// destructors would never run: undefined behaviour in C++ and a leak in practice. Patching the hole
// keeps the control flow ordinary and costs nothing on the hot path: entering a scope is two
// thread-local stores, no system call and no signal-mask change.
//
// Anything else is not ours: a SIGBUS outside every active scope, on a thread without a scope, or sent
// with kill(2), restores the default action and re-raises, so a genuine bug still dumps core.
//
// Thread safety: install_bus_guard() may be called from any thread, any number of times. A BusGuard
// belongs to the thread that created it and must be destroyed on that thread, innermost first (scopes
// nest like the stack frames that hold them). The handler owns the whole process's SIGBUS disposition:
// nothing else in a process that uses the guard may install one.
//
// Header-only, for executables (the daemon, the CLI, tests, benchmarks): the innermost scope is an
// initial-exec thread-local, which a library loaded with dlopen could not always get.
#pragma once

#include <signal.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <utility>

namespace rankstat::shm {

class BusGuard;

namespace detail {

// Initial-exec TLS: the handler reads it without calling into the dynamic loader.
__attribute__((tls_model("initial-exec"))) inline constinit thread_local BusGuard* bus_guard_innermost =
    nullptr;

// Written once by install_bus_guard() before the handler is installed; read by the handler.
inline std::uintptr_t bus_guard_page_bytes = 4096;

inline std::atomic<std::uint64_t> bus_errors_absorbed_total{0};

struct BusGuardAccess;

}  // namespace detail

class BusGuard {
 public:
  // Guards [base, base + bytes). A null base guards every address (used while a segment is being
  // opened, when its mapping address is not known yet); a fault there patches only the faulting page.
  BusGuard(const void* base, std::uint64_t bytes) noexcept
      : begin_(reinterpret_cast<std::uintptr_t>(base)),
        end_(base == nullptr ? 0 : reinterpret_cast<std::uintptr_t>(base) + bytes),
        outer_(detail::bus_guard_innermost) {
    // The handler runs on this thread, between two instructions of this thread: a compiler barrier is
    // enough to make the scope visible to it before the guarded reads.
    detail::bus_guard_innermost = this;
    std::atomic_signal_fence(std::memory_order_seq_cst);
  }
  ~BusGuard() {
    std::atomic_signal_fence(std::memory_order_seq_cst);
    detail::bus_guard_innermost = outer_;
  }
  BusGuard(const BusGuard&) = delete;
  BusGuard& operator=(const BusGuard&) = delete;

  // True once a bus error inside the range was absorbed during this scope.
  bool faulted() const noexcept { return faulted_ != 0; }

 private:
  friend struct detail::BusGuardAccess;
  std::uintptr_t begin_;
  std::uintptr_t end_;
  BusGuard* outer_;
  volatile int faulted_ = 0;  // written by the signal handler on this thread only
};

namespace detail {

struct BusGuardAccess {
  static std::uintptr_t begin(const BusGuard& g) { return g.begin_; }
  static std::uintptr_t end(const BusGuard& g) { return g.end_; }
  static BusGuard* outer(const BusGuard& g) { return g.outer_; }
  static void mark(BusGuard& g) { g.faulted_ = 1; }
};

inline void default_and_reraise() noexcept {
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
inline void on_sigbus(int, siginfo_t* info, void*) noexcept {
  const auto address = reinterpret_cast<std::uintptr_t>(info->si_addr);
  if (info->si_code != BUS_ADRERR) {
    default_and_reraise();
    return;
  }
  const std::uintptr_t page_bytes = bus_guard_page_bytes;
  for (BusGuard* g = bus_guard_innermost; g != nullptr; g = BusGuardAccess::outer(*g)) {
    const std::uintptr_t begin = BusGuardAccess::begin(*g);
    const std::uintptr_t end = BusGuardAccess::end(*g);
    const bool everywhere = begin == 0 && end == 0;
    if (!everywhere && (address < begin || address >= end)) continue;
    const std::uintptr_t page = address & ~(page_bytes - 1);
    std::uintptr_t stop = everywhere ? page + page_bytes : (end + page_bytes - 1) & ~(page_bytes - 1);
    if (stop <= page) stop = page + page_bytes;
    const long mapped = ::syscall(SYS_mmap, page, stop - page, PROT_READ | PROT_WRITE,
                                  MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
    if (mapped == -1) break;  // cannot patch: fall through to the default action
    BusGuardAccess::mark(*g);
    bus_errors_absorbed_total.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  default_and_reraise();
}

}  // namespace detail

// Installs the process-wide SIGBUS handler. Idempotent and thread-safe; call before mapping segments.
// Returns false if sigaction failed (the guards then cannot absorb anything).
inline bool install_bus_guard() noexcept {
  static const bool installed = [] {
    const long page = sysconf(_SC_PAGESIZE);
    if (page > 0) detail::bus_guard_page_bytes = static_cast<std::uintptr_t>(page);
    struct sigaction action {};
    action.sa_sigaction = detail::on_sigbus;
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_SIGINFO;
    return sigaction(SIGBUS, &action, nullptr) == 0;
  }();
  return installed;
}

// Runs `read` inside a BusGuard over [base, base + bytes) (a null base: every address). False if a bus
// error was absorbed meanwhile: what `read` produced then holds zeros for real data and is discarded.
template <typename Read>
bool run_bus_guarded(const void* base, std::uint64_t bytes, Read&& read) {
  BusGuard guard(base, bytes);
  std::forward<Read>(read)();
  return !guard.faulted();
}

// Bus errors absorbed since the process started (any thread, any scope); for tests and diagnostics.
inline std::uint64_t bus_errors_absorbed() noexcept {
  return detail::bus_errors_absorbed_total.load(std::memory_order_relaxed);
}

}  // namespace rankstat::shm
