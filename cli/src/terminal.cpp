#include "terminal.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <array>
#include <cerrno>

namespace rankstat::cli {
namespace {

constexpr std::array<int, 6> kSignals = {SIGINT, SIGTERM, SIGHUP, SIGWINCH, SIGTSTP, SIGCONT};

int g_write_fd = -1;
std::array<struct sigaction, kSignals.size()> g_previous{};

extern "C" void forward_signal(int signo) {
  const int saved = errno;
  const auto byte = static_cast<unsigned char>(signo);
  if (g_write_fd >= 0) (void)!::write(g_write_fd, &byte, 1);
  errno = saved;
}

void install(int signo, struct sigaction* previous) {
  struct sigaction action {};
  action.sa_handler = forward_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  sigaction(signo, &action, previous);
}

}  // namespace

SignalPipe::SignalPipe() {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0) return;
  read_fd_ = fds[0];
  g_write_fd = fds[1];
  for (std::size_t i = 0; i < kSignals.size(); ++i) install(kSignals[i], &g_previous[i]);
}

SignalPipe::~SignalPipe() {
  if (read_fd_ < 0) return;
  for (std::size_t i = 0; i < kSignals.size(); ++i) sigaction(kSignals[i], &g_previous[i], nullptr);
  ::close(g_write_fd);
  g_write_fd = -1;
  ::close(read_fd_);
}

std::vector<int> SignalPipe::take() {
  std::vector<int> signals;
  unsigned char buffer[64];
  for (;;) {
    const ssize_t n = ::read(read_fd_, buffer, sizeof buffer);
    if (n <= 0) break;
    for (ssize_t i = 0; i < n; ++i) signals.push_back(buffer[i]);
  }
  return signals;
}

void SignalPipe::rearm(int signo) {
  install(signo, nullptr);
}

TerminalSize terminal_size(int fd) {
  TerminalSize size;
  winsize ws{};
  if (::ioctl(fd, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0 && ws.ws_row > 0) {
    size.columns = ws.ws_col;
    size.rows = ws.ws_row;
  }
  return size;
}

void Screen::write_all(const std::string& bytes) {
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(out_fd_, bytes.data() + done, bytes.size() - done);
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return;
    }
    done += static_cast<std::size_t>(n);
  }
}

bool Screen::enter() {
  if (active_) return true;
  if (::isatty(out_fd_) == 0) return false;
  raw_input_ = false;
  if (::isatty(in_fd_) != 0 && ::tcgetattr(in_fd_, &saved_) == 0) {
    termios raw = saved_;
    raw.c_lflag &= ~static_cast<tcflag_t>(ICANON | ECHO);
    raw.c_cc[VMIN] = 0;
    raw.c_cc[VTIME] = 0;
    raw_input_ = ::tcsetattr(in_fd_, TCSANOW, &raw) == 0;
  }
  // Alternate screen, cursor hidden, wrap off (long lines are cut, never folded onto the next row).
  write_all("\x1b[?1049h\x1b[?25l\x1b[?7l\x1b[H\x1b[2J");
  active_ = true;
  return true;
}

void Screen::leave() {
  if (!active_) return;
  write_all("\x1b[0m\x1b[?7h\x1b[?25h\x1b[?1049l");
  if (raw_input_) ::tcsetattr(in_fd_, TCSANOW, &saved_);
  raw_input_ = false;
  active_ = false;
}

void Screen::draw(const std::vector<std::string>& lines) {
  // No line break after the last line: writing into the bottom row must never scroll the screen.
  std::string frame = "\x1b[H";
  for (std::size_t i = 0; i < lines.size(); ++i) {
    frame.append(lines[i]).append("\x1b[K");
    if (i + 1 < lines.size()) frame.append("\r\n");
  }
  frame.append("\x1b[J");
  write_all(frame);
}

}  // namespace rankstat::cli
