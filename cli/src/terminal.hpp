// Terminal plumbing for `rankstat top`: signals delivered through a self-pipe (so the refresh loop
// can poll for them together with key presses), and a full-screen session (alternate screen, hidden
// cursor, unbuffered input) that always gives the terminal back as it found it.
#pragma once

#include <termios.h>

#include <string>
#include <vector>

namespace rankstat::cli {

// Routes SIGINT, SIGTERM, SIGHUP, SIGWINCH, SIGTSTP and SIGCONT to a pipe while it lives; the
// previous dispositions are restored on destruction. One instance at a time.
class SignalPipe {
 public:
  SignalPipe();
  ~SignalPipe();
  SignalPipe(const SignalPipe&) = delete;
  SignalPipe& operator=(const SignalPipe&) = delete;

  int fd() const { return read_fd_; }
  // The signals received since the last call, in arrival order.
  std::vector<int> take();
  // Re-installs the handler for `signo` (after it was reset to stop the process).
  void rearm(int signo);

 private:
  int read_fd_ = -1;
};

struct TerminalSize {
  int columns = 80;
  int rows = 24;
};
TerminalSize terminal_size(int fd);

// Full-screen mode on a terminal. enter() switches to the alternate screen, hides the cursor and, when
// stdin is a terminal, turns off line buffering and echo (signals such as Ctrl-C keep working);
// leave() undoes all of it and is safe to call twice. The destructor calls leave().
class Screen {
 public:
  Screen(int out_fd, int in_fd) : out_fd_(out_fd), in_fd_(in_fd) {}
  ~Screen() { leave(); }
  Screen(const Screen&) = delete;
  Screen& operator=(const Screen&) = delete;

  bool enter();
  void leave();
  bool active() const { return active_; }
  bool reads_keys() const { return raw_input_; }
  // Replaces the whole screen with `lines` (already styled), without clearing first (no flicker).
  void draw(const std::vector<std::string>& lines);

 private:
  void write_all(const std::string& bytes);

  int out_fd_;
  int in_fd_;
  bool active_ = false;
  bool raw_input_ = false;
  termios saved_{};
};

}  // namespace rankstat::cli
