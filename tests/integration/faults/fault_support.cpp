#include "fault_support.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>

namespace rankstat::faults {

using namespace std::chrono_literals;

TmpfsMount::TmpfsMount(const std::string& size) {
  path_ = parent_.path() + "/mnt";
  if (::mkdir(path_.c_str(), 0700) != 0) {
    error_ = std::string("mkdir: ") + std::strerror(errno);
    return;
  }
  const std::string data = "size=" + size + ",mode=0700";
  if (::mount("tmpfs", path_.c_str(), "tmpfs", MS_NOSUID | MS_NODEV, data.c_str()) != 0) {
    error_ = std::string("mount -t tmpfs -o ") + data + " " + path_ + ": " + std::strerror(errno);
    return;
  }
  mounted_ = true;
}

TmpfsMount::~TmpfsMount() {
  // Lazy, so a file still open by a child being torn down cannot keep the mount alive.
  if (mounted_) ::umount2(path_.c_str(), MNT_DETACH);
}

WrappedDaemon::WrappedDaemon(const std::vector<std::string>& wrapper, const std::string& shm_dir,
                             const std::vector<std::string>& extra_args,
                             std::chrono::milliseconds start_timeout) {
  // Another user must be able to write its log and address file.
  ::chmod(files_.path().c_str(), 0777);
  log_path_ = files_.path() + "/rankstatd.log";
  address_path_ = files_.path() + "/address";
  std::vector<std::string> argv = wrapper;
  for (const std::string& arg :
       {testkit::binary_path("daemon/rankstatd"), std::string("--web.listen-address=127.0.0.1:0"),
        "--shm.dir=" + shm_dir, "--web.address-file=" + address_path_, std::string("--log.level=debug")}) {
    argv.push_back(arg);
  }
  argv.insert(argv.end(), extra_args.begin(), extra_args.end());
  process_ = std::make_unique<testkit::ChildProcess>(argv, std::map<std::string, std::string>{}, log_path_);
  testkit::wait_until(
      [&] {
        const std::string address = testkit::read_file(address_path_);
        const auto colon = address.rfind(':');
        if (colon != std::string::npos) port_ = std::atoi(address.c_str() + colon + 1);
        return port_ > 0 || !process_->running();
      },
      start_timeout);
}

std::optional<testkit::HttpResponse> WrappedDaemon::get(const std::string& target) {
  return testkit::http_get("127.0.0.1", port_, target);
}

std::string WrappedDaemon::scrape() {
  const auto r = get("/metrics");
  return r && r->status == 200 ? r->body : std::string();
}

bool can_switch_user() {
  return ::geteuid() == 0 && ::access("/usr/bin/setpriv", X_OK) == 0;
}

std::vector<std::string> as_user(unsigned uid) {
  return {"/usr/bin/setpriv", "--reuid=" + std::to_string(uid), "--regid=" + std::to_string(uid),
          "--clear-groups"};
}

std::vector<std::string> MonotonicWatch::observe(const std::string& exposition) {
  std::vector<std::string> decreases;
  std::istringstream lines(exposition);
  std::string line;
  std::vector<std::string> monotonic_families;  // of this exposition, from its # TYPE lines
  while (std::getline(lines, line)) {
    if (line.rfind("# TYPE ", 0) == 0) {
      std::istringstream words(line.substr(7));
      std::string name;
      std::string type;
      words >> name >> type;
      if (type != "counter" && type != "histogram") continue;
      for (const std::string& prefix : prefixes_) {
        if (name.rfind(prefix, 0) == 0) {
          monotonic_families.push_back(name);
          break;
        }
      }
      continue;
    }
    if (line.empty() || line[0] == '#') continue;
    const auto space = line.rfind(' ');
    if (space == std::string::npos) continue;
    const std::string key = line.substr(0, space);
    const std::string name = key.substr(0, key.find('{'));
    bool wanted = false;
    for (const std::string& family : monotonic_families) {
      if (name == family || name == family + "_bucket" || name == family + "_count" ||
          name == family + "_sum") {
        wanted = true;
        break;
      }
    }
    if (!wanted) continue;
    const double value = std::strtod(line.c_str() + space + 1, nullptr);
    ++samples_checked_;
    auto [it, inserted] = highest_.try_emplace(key, value);
    if (inserted) continue;
    if (value < it->second) {
      // Four units in the last place of the larger value: reordered floating-point additions.
      const double ulp = std::nextafter(it->second, HUGE_VAL) - it->second;
      if (it->second - value <= 4 * ulp) {
        ++rounding_decreases_;
        continue;
      }
      char text[160];
      std::snprintf(text, sizeof text, " went from %.17g to %.17g", it->second, value);
      decreases.push_back(key + text);
    } else {
      it->second = value;
    }
  }
  return decreases;
}

BackgroundScraper::BackgroundScraper(std::vector<std::string> prefixes, std::chrono::milliseconds interval)
    : watch_(std::move(prefixes)) {
  thread_ = std::thread([this, interval] { run(interval); });
}

BackgroundScraper::~BackgroundScraper() {
  stop_.store(true);
  thread_.join();
}

void BackgroundScraper::run(std::chrono::milliseconds interval) {
  while (!stop_.load()) {
    const int port = port_.load();
    if (port > 0) {
      auto response = testkit::http_get("127.0.0.1", port, "/metrics", {}, 2s);
      if (response && response->status == 200) {
        ++ok_;
        std::lock_guard lock(mutex_);
        for (std::string& v : watch_.observe(response->body)) violations_.push_back(std::move(v));
        last_body_ = std::move(response->body);
      } else {
        ++failed_;
      }
    }
    std::this_thread::sleep_for(interval);
  }
}

std::vector<std::string> BackgroundScraper::violations() const {
  std::lock_guard lock(mutex_);
  return violations_;
}

std::uint64_t BackgroundScraper::samples_checked() const {
  std::lock_guard lock(mutex_);
  return watch_.samples_checked();
}

std::uint64_t BackgroundScraper::rounding_decreases() const {
  std::lock_guard lock(mutex_);
  return watch_.rounding_decreases();
}

std::string BackgroundScraper::last_body() const {
  std::lock_guard lock(mutex_);
  return last_body_;
}

int connect_loopback(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(fd);
    return -1;
  }
  const int flags = ::fcntl(fd, F_GETFL);
  ::fcntl(fd, F_SETFL, flags | O_NONBLOCK);
  return fd;
}

namespace {
bool wait_readable(int fd, std::chrono::steady_clock::time_point deadline) {
  const auto left =
      std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
  if (left.count() <= 0) return false;
  pollfd p{fd, POLLIN, 0};
  return ::poll(&p, 1, static_cast<int>(left.count())) == 1;
}
}  // namespace

bool closed_by_peer(int fd, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  char buffer[4096];
  while (wait_readable(fd, deadline)) {
    const ssize_t n = ::recv(fd, buffer, sizeof buffer, 0);
    if (n == 0) return true;
    if (n < 0 && errno != EAGAIN && errno != EINTR) return true;  // reset
  }
  return false;
}

std::optional<std::string> raw_exchange(int port, const std::string& request,
                                        std::chrono::milliseconds timeout) {
  const int fd = connect_loopback(port);
  if (fd < 0) return std::nullopt;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::size_t sent = 0;
  while (sent < request.size() && std::chrono::steady_clock::now() < deadline) {
    const ssize_t n = ::send(fd, request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
    if (n > 0) {
      sent += static_cast<std::size_t>(n);
    } else if (n < 0 && errno != EAGAIN && errno != EINTR) {
      break;  // the server may answer and close before reading everything (431, 400)
    } else {
      std::this_thread::sleep_for(1ms);
    }
  }
  std::string reply;
  char buffer[65536];
  while (wait_readable(fd, deadline)) {
    const ssize_t n = ::recv(fd, buffer, sizeof buffer, 0);
    if (n == 0) break;
    if (n < 0) {
      if (errno == EAGAIN || errno == EINTR) continue;
      break;
    }
    reply.append(buffer, static_cast<std::size_t>(n));
  }
  ::close(fd);
  return reply;
}

std::optional<std::uint64_t> rss_kib(pid_t pid) {
  const std::string status = testkit::read_file("/proc/" + std::to_string(pid) + "/status");
  const auto at = status.find("VmRSS:");
  if (at == std::string::npos) return std::nullopt;
  return std::strtoull(status.c_str() + at + 6, nullptr, 10);
}

std::size_t count_lines(const std::string& text, const std::string& needle) {
  std::size_t n = 0;
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.find(needle) != std::string::npos) ++n;
  }
  return n;
}

bool poke(const std::string& path, std::uint64_t offset, const void* bytes, std::size_t size) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const bool ok = ::pwrite(fd, bytes, size, static_cast<off_t>(offset)) == static_cast<ssize_t>(size);
  ::close(fd);
  return ok;
}

void report_count(const std::string& name, std::uint64_t value) {
  std::printf("[fault-counts] %s=%llu\n", name.c_str(), static_cast<unsigned long long>(value));
  std::fflush(stdout);
}

}  // namespace rankstat::faults
