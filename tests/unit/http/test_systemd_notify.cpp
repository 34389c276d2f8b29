#include "http/systemd_notify.hpp"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include <array>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>
#include <string>

using namespace std::chrono_literals;

namespace {

// A stand-in for systemd's notification socket: an AF_UNIX datagram socket in a private temp dir,
// advertised through $NOTIFY_SOCKET for the lifetime of the object. Each test case runs in its own
// process (catch_discover_tests), so touching the environment is safe.
class FakeNotifySocket {
 public:
  FakeNotifySocket() {
    std::string directory_template =
        (std::filesystem::temp_directory_path() / "rankstat-notify-XXXXXX").string();
    REQUIRE(::mkdtemp(directory_template.data()) != nullptr);
    directory_ = directory_template;
    socket_path_ = directory_ + "/notify.sock";

    fd_ = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    REQUIRE(fd_ >= 0);
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    REQUIRE(socket_path_.size() < sizeof address.sun_path);
    std::memcpy(address.sun_path, socket_path_.c_str(), socket_path_.size() + 1);
    REQUIRE(::bind(fd_, reinterpret_cast<const sockaddr*>(&address), sizeof address) == 0);
    REQUIRE(::setenv("NOTIFY_SOCKET", socket_path_.c_str(), 1) == 0);
  }

  ~FakeNotifySocket() {
    ::unsetenv("NOTIFY_SOCKET");
    ::close(fd_);
    std::error_code ignored;
    std::filesystem::remove_all(directory_, ignored);
  }

  FakeNotifySocket(const FakeNotifySocket&) = delete;
  FakeNotifySocket& operator=(const FakeNotifySocket&) = delete;

  // The next datagram, or nullopt when none arrives within `wait`.
  std::optional<std::string> receive(std::chrono::milliseconds wait) {
    pollfd readable{fd_, POLLIN, 0};
    if (::poll(&readable, 1, static_cast<int>(wait.count())) != 1) return std::nullopt;
    std::array<char, 4096> datagram{};
    const ssize_t length = ::recv(fd_, datagram.data(), datagram.size(), 0);
    if (length < 0) return std::nullopt;
    return std::string(datagram.data(), static_cast<std::size_t>(length));
  }

 private:
  std::string directory_;
  std::string socket_path_;
  int fd_ = -1;
};

}  // namespace

TEST_CASE("notify_ready sends READY=1 and the status to $NOTIFY_SOCKET") {
  FakeNotifySocket systemd;

  rankstat::http::notify_ready("serving 8 ranks");

  const std::optional<std::string> message = systemd.receive(2s);
  REQUIRE(message.has_value());
  CHECK(message->find("READY=1") != std::string::npos);
  CHECK(message->find("STATUS=serving 8 ranks") != std::string::npos);
}

TEST_CASE("each lifecycle notification sends its systemd keyword") {
  FakeNotifySocket systemd;

  rankstat::http::notify_reloading();
  const std::optional<std::string> reloading = systemd.receive(2s);
  rankstat::http::notify_stopping();
  const std::optional<std::string> stopping = systemd.receive(2s);
  rankstat::http::notify_watchdog();
  const std::optional<std::string> watchdog = systemd.receive(2s);

  REQUIRE(reloading.has_value());
  CHECK(reloading->find("RELOADING=1") != std::string::npos);
  CHECK(reloading->find("MONOTONIC_USEC=") != std::string::npos);
  CHECK(stopping == "STOPPING=1");
  CHECK(watchdog == "WATCHDOG=1");
}

TEST_CASE("a multi-line status cannot inject extra notification fields") {
  FakeNotifySocket systemd;

  rankstat::http::notify_ready("degraded\nWATCHDOG=trigger");

  const std::optional<std::string> message = systemd.receive(2s);
  REQUIRE(message.has_value());
  CHECK(*message == "READY=1\nSTATUS=degraded WATCHDOG=trigger");
}

TEST_CASE("without NOTIFY_SOCKET the notifications do nothing") {
  FakeNotifySocket systemd;
  ::unsetenv("NOTIFY_SOCKET");

  rankstat::http::notify_ready("x");
  rankstat::http::notify_watchdog();

  CHECK_FALSE(systemd.receive(200ms).has_value());
}

TEST_CASE("watchdog_interval is half of WATCHDOG_USEC when the watchdog targets this process") {
  REQUIRE(::setenv("WATCHDOG_USEC", "4000000", 1) == 0);
  REQUIRE(::setenv("WATCHDOG_PID", std::to_string(::getpid()).c_str(), 1) == 0);

  const auto interval = rankstat::http::watchdog_interval();

  REQUIRE(interval.has_value());
  CHECK(*interval == 2s);
  ::unsetenv("WATCHDOG_USEC");
  ::unsetenv("WATCHDOG_PID");
}

TEST_CASE("watchdog_interval is empty without a watchdog or when it is meant for another process") {
  ::unsetenv("WATCHDOG_USEC");
  ::unsetenv("WATCHDOG_PID");
  CHECK_FALSE(rankstat::http::watchdog_interval().has_value());

  REQUIRE(::setenv("WATCHDOG_USEC", "4000000", 1) == 0);
  REQUIRE(::setenv("WATCHDOG_PID", std::to_string(::getpid() + 1).c_str(), 1) == 0);
  CHECK_FALSE(rankstat::http::watchdog_interval().has_value());
  ::unsetenv("WATCHDOG_USEC");
  ::unsetenv("WATCHDOG_PID");
}
