// SIGBUS containment for reads of mapped segment memory.
//
// The daemon maps files that other processes own. Anyone with write access to such a file can
// ftruncate it while it is mapped; touching a page that is now beyond the end of the file raises
// SIGBUS, which by default kills the process. The daemon must survive that and keep serving everyone
// else, so every read (and the few writes: `head`, the consumer heartbeat) of a segment's mapping runs
// inside a BusGuard scope naming the mapping:
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
#pragma once

#include <cstdint>

namespace rankstat {

// Installs the process-wide SIGBUS handler. Idempotent and thread-safe; call before mapping segments.
// Returns false if sigaction failed (the guards then cannot absorb anything).
bool install_bus_guard() noexcept;

class BusGuard {
 public:
  // Guards [base, base + bytes). A null base guards every address (used while a segment is being
  // opened, when its mapping address is not known yet); a fault there patches only the faulting page.
  BusGuard(const void* base, std::uint64_t bytes) noexcept;
  ~BusGuard();
  BusGuard(const BusGuard&) = delete;
  BusGuard& operator=(const BusGuard&) = delete;

  // True once a bus error inside the range was absorbed during this scope.
  bool faulted() const noexcept { return faulted_ != 0; }

 private:
  friend struct BusGuardAccess;
  std::uintptr_t begin_;
  std::uintptr_t end_;
  BusGuard* outer_;
  volatile int faulted_ = 0;  // written by the signal handler on this thread only
};

// Bus errors absorbed since the process started (any thread, any scope); for tests and diagnostics.
std::uint64_t bus_errors_absorbed() noexcept;

}  // namespace rankstat
