#include "http/gzip.hpp"

#include <catch2/catch.hpp>

#include <cstdint>
#include <random>
#include <stdexcept>
#include <string>

using rankstat::http::gzip_compress;
using rankstat::http::gzip_decompress;

namespace {

std::string random_bytes(std::size_t count, std::uint32_t seed) {
  std::mt19937 generator(seed);
  std::uniform_int_distribution<int> byte(0, 255);
  std::string bytes(count, '\0');
  for (char& c : bytes) c = static_cast<char>(byte(generator));
  return bytes;
}

std::string repetitive_text(std::size_t lines) {
  std::string text;
  for (std::size_t i = 0; i < lines; ++i) text += "rankstat_up{rank=\"" + std::to_string(i % 64) + "\"} 1\n";
  return text;
}

}  // namespace

TEST_CASE("gzip output starts with the gzip magic bytes and round-trips") {
  const std::string text = repetitive_text(1000);

  const std::string compressed = gzip_compress(text);

  REQUIRE(compressed.size() > 10);
  CHECK(static_cast<unsigned char>(compressed[0]) == 0x1f);
  CHECK(static_cast<unsigned char>(compressed[1]) == 0x8b);
  CHECK(compressed.size() < text.size() / 5);
  CHECK(gzip_decompress(compressed) == text);
}

TEST_CASE("every compression level round-trips, and higher levels are not larger on text") {
  const std::string text = repetitive_text(2000);
  std::size_t fastest_size = 0;
  for (int level = 0; level <= 9; ++level) {
    INFO("level " << level);
    const std::string compressed = gzip_compress(text, level);
    CHECK(gzip_decompress(compressed) == text);
    if (level == 1) fastest_size = compressed.size();
    if (level == 9) CHECK(compressed.size() <= fastest_size);
  }
  CHECK(gzip_decompress(gzip_compress(text, -1)) == text);
}

TEST_CASE("empty and incompressible inputs round-trip") {
  CHECK(gzip_decompress(gzip_compress("")).empty());
  const std::string noise = random_bytes(300000, 42);
  CHECK(gzip_decompress(gzip_compress(noise, 3)) == noise);
}

TEST_CASE("an invalid compression level throws") {
  CHECK_THROWS_AS(gzip_compress("data", 42), std::runtime_error);
}

TEST_CASE("corrupt, truncated or trailing-garbage gzip input throws") {
  const std::string compressed = gzip_compress(repetitive_text(100));

  CHECK_THROWS_AS(gzip_decompress(""), std::runtime_error);
  CHECK_THROWS_AS(gzip_decompress("definitely not gzip"), std::runtime_error);
  CHECK_THROWS_AS(gzip_decompress(compressed.substr(0, compressed.size() / 2)), std::runtime_error);
  CHECK_THROWS_AS(gzip_decompress(compressed + "junk"), std::runtime_error);

  std::string flipped = compressed;
  flipped[flipped.size() - 6] = static_cast<char>(flipped[flipped.size() - 6] ^ 0x55);  // CRC32 trailer
  CHECK_THROWS_AS(gzip_decompress(flipped), std::runtime_error);
}

TEST_CASE("decompression stops at the output limit") {
  const std::string zeros(1 << 20, '\0');
  const std::string compressed = gzip_compress(zeros);

  CHECK(gzip_decompress(compressed, zeros.size()) == zeros);
  CHECK_THROWS_AS(gzip_decompress(compressed, zeros.size() - 1), std::runtime_error);
}
