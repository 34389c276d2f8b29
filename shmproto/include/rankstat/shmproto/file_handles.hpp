// Owners of a segment's mapping and descriptors, and the inode checks that keep a writer from removing or
// replacing a file that is not the one it judged.
#pragma once

#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <string>
#include <utility>

#include "rankstat/shmproto/layout.hpp"

namespace rankstat::shm {

// Owns one mapping of a segment file and its descriptor. Move-only.
class MappedFile {
 public:
  MappedFile() = default;
  MappedFile(int fd, void* address, std::uint64_t bytes) : fd_(fd), address_(address), bytes_(bytes) {}
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  MappedFile(MappedFile&& other) noexcept { *this = std::move(other); }
  MappedFile& operator=(MappedFile&& other) noexcept {
    if (this != &other) {
      reset();
      fd_ = std::exchange(other.fd_, -1);
      address_ = std::exchange(other.address_, nullptr);
      bytes_ = std::exchange(other.bytes_, 0);
    }
    return *this;
  }
  ~MappedFile() { reset(); }

  void reset() {
    if (address_ != nullptr) munmap(address_, bytes_);
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
    address_ = nullptr;
    bytes_ = 0;
  }

  bool valid() const { return address_ != nullptr; }
  int fd() const { return fd_; }
  std::uint8_t* bytes() const { return static_cast<std::uint8_t*>(address_); }
  std::uint64_t size() const { return bytes_; }
  SegmentHeader* header() const { return static_cast<SegmentHeader*>(address_); }

 private:
  int fd_ = -1;
  void* address_ = nullptr;
  std::uint64_t bytes_ = 0;
};

// A descriptor closed on scope exit.
class ScopedFd {
 public:
  explicit ScopedFd(int fd) : fd_(fd) {}
  ScopedFd(const ScopedFd&) = delete;
  ScopedFd& operator=(const ScopedFd&) = delete;
  ~ScopedFd() { reset(-1); }
  void reset(int fd) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
  }
  int get() const { return fd_; }

 private:
  int fd_;
};

inline bool same_inode(const struct stat& a, const struct stat& b) {
  return a.st_ino == b.st_ino && a.st_dev == b.st_dev;
}

// Removes `path` only if it names the same inode as the open `fd`, so a newer generation renamed onto
// the name in the meantime survives. Returns true if it unlinked.
inline bool unlink_if_same_file(int fd, const std::string& path) {
  struct stat by_fd {};
  struct stat by_name {};
  if (fstat(fd, &by_fd) != 0 || lstat(path.c_str(), &by_name) != 0) return false;
  if (by_fd.st_ino != by_name.st_ino || by_fd.st_dev != by_name.st_dev) return false;
  return ::unlink(path.c_str()) == 0;
}

}  // namespace rankstat::shm
