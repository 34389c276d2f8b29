// Shared by the fuzz targets: reading fixed-width values out of the fuzzer's bytes, and an oracle check
// that stops the run (libFuzzer records the input) when an invariant of the parsers is broken.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace rankstat::fuzz {

// Consumes fixed-width values from the front of the input; missing bytes read as zero.
class Bytes {
 public:
  Bytes(const std::uint8_t* data, std::size_t size) : data_(data), size_(size) {}
  template <typename T>
  T take() {
    T value{};
    const std::size_t n = size_ < sizeof value ? size_ : sizeof value;
    std::memcpy(&value, data_, n);
    data_ += n;
    size_ -= n;
    return value;
  }
  const std::uint8_t* data() const { return data_; }
  std::size_t size() const { return size_; }

 private:
  const std::uint8_t* data_;
  std::size_t size_;
};

[[noreturn]] inline void broken(const char* what) {
  std::fprintf(stderr, "fuzz oracle: %s\n", what);
  std::abort();
}

#define RANKSTAT_FUZZ_EXPECT(condition)                     \
  do {                                                      \
    if (!(condition)) ::rankstat::fuzz::broken(#condition); \
  } while (false)

}  // namespace rankstat::fuzz
