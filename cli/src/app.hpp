// The rankstat command line: parses arguments, picks the source, runs one command, maps the outcome to
// the documented exit codes (docs/api.md, "Exit codes").
#pragma once

namespace rankstat::cli {

enum ExitCode : int {
  kExitOk = 0,
  kExitRuntime = 1,      // anything unexpected: a bad answer, an I/O error
  kExitUsage = 2,        // the command line is wrong
  kExitUnavailable = 3,  // the daemon is not reachable; with --direct, no segment to read
  kExitNotFound = 4,     // no such rank
};

int run(int argc, char** argv);

}  // namespace rankstat::cli
