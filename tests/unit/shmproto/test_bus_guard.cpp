// The SIGBUS guard on plain files: a truncated page read under a guard reads zeros and marks the guard,
// nested guards each see their own range, and a bus error that is not ours still kills the process.
// All files live in a testkit::TempDir; the cases that must die run in a forked child.
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include <catch2/catch.hpp>

#include "rankstat/shmproto/bus_guard.hpp"
#include "testkit.hpp"

namespace {

namespace shm = rankstat::shm;
using rankstat::testkit::TempDir;

const long kPage = sysconf(_SC_PAGESIZE);

// A file of `pages` pages filled with 0xAB, mapped shared read-write.
struct MappedPages {
  explicit MappedPages(const std::string& path, int pages) : bytes(static_cast<std::size_t>(pages * kPage)) {
    fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    REQUIRE(fd >= 0);
    REQUIRE(::ftruncate(fd, static_cast<off_t>(bytes)) == 0);
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    REQUIRE(p != MAP_FAILED);
    base = static_cast<std::uint8_t*>(p);
    std::memset(base, 0xAB, bytes);
  }
  ~MappedPages() {
    munmap(base, bytes);
    ::close(fd);
  }
  int fd = -1;
  std::uint8_t* base = nullptr;
  std::size_t bytes = 0;
};

std::uint8_t read_byte(const std::uint8_t* p) {
  return *static_cast<const volatile std::uint8_t*>(p);
}

// Runs `body` in a forked child without core dumps; returns the signal that ended it (0 if it exited).
template <typename Body>
int signal_of_child(Body&& body) {
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    rlimit no_core{0, 0};
    setrlimit(RLIMIT_CORE, &no_core);
    body();
    _exit(0);
  }
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  return WIFSIGNALED(status) ? WTERMSIG(status) : 0;
}

}  // namespace

TEST_CASE("a read of pages truncated under a guard reads zeros and marks the guard faulted") {
  REQUIRE(shm::install_bus_guard());
  TempDir dir;
  MappedPages pages(dir.path() + "/file", 4);
  REQUIRE(::ftruncate(pages.fd, kPage) == 0);  // pages 1..3 vanish under the mapping
  const std::uint64_t before = shm::bus_errors_absorbed();
  shm::BusGuard guard(pages.base, pages.bytes);
  CHECK(read_byte(pages.base) == 0xAB);  // page 0 is still backed by the file
  CHECK_FALSE(guard.faulted());
  CHECK(read_byte(pages.base + 2 * kPage + 17) == 0);
  CHECK(guard.faulted());
  CHECK(read_byte(pages.base + 3 * kPage) == 0);  // patched to the end of the range in one go
  CHECK(shm::bus_errors_absorbed() == before + 1);
}

TEST_CASE("a guard absorbs only faults inside its own range and nested guards each see their own") {
  REQUIRE(shm::install_bus_guard());
  TempDir dir;
  MappedPages a(dir.path() + "/a", 2);
  MappedPages b(dir.path() + "/b", 2);
  REQUIRE(::ftruncate(a.fd, 0) == 0);
  REQUIRE(::ftruncate(b.fd, 0) == 0);
  shm::BusGuard outer(a.base, a.bytes);
  {
    shm::BusGuard inner(b.base, b.bytes);
    CHECK(read_byte(a.base + kPage) == 0);  // a's range: the outer guard absorbs it
    CHECK(outer.faulted());
    CHECK_FALSE(inner.faulted());
    CHECK(read_byte(b.base) == 0);
    CHECK(inner.faulted());
  }
}

TEST_CASE("a bus error outside every guard still kills the process with SIGBUS") {
  TempDir dir;
  const std::string path = dir.path() + "/file";
  const int signo = signal_of_child([&] {
    shm::install_bus_guard();
    MappedPages pages(path, 2);
    if (::ftruncate(pages.fd, 0) != 0) _exit(3);
    shm::BusGuard elsewhere(pages.base + pages.bytes, 4096);  // a guard for another range
    (void)read_byte(pages.base);
    _exit(0);
  });
  CHECK(signo == SIGBUS);
}

TEST_CASE("a SIGBUS sent with kill is not absorbed even inside a guard") {
  const int signo = signal_of_child([] {
    shm::install_bus_guard();
    shm::BusGuard everywhere(nullptr, 0);
    ::kill(getpid(), SIGBUS);
    _exit(0);
  });
  CHECK(signo == SIGBUS);
}
