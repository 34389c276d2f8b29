/* An engine rank outside the rankstat tree, through the C ABI: a counter
 * outside_engine_requests_total{lang="c"} of 5, then heartbeats until SIGTERM or the given number of
 * seconds. Usage: outside_engine_c SHM_DIR [SECONDS [INSTANCE]] */
#define _POSIX_C_SOURCE 200809L
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "rankstat/rankstat.h"

static volatile sig_atomic_t g_stop = 0;
static void on_signal(int signal_number) {
  (void)signal_number;
  g_stop = 1;
}

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s SHM_DIR [SECONDS [INSTANCE]]\n", argv[0]);
    return 2;
  }
  const int seconds = argc > 2 ? atoi(argv[2]) : 30;
  signal(SIGTERM, on_signal);
  signal(SIGINT, on_signal);

  rankstat_identity identity;
  rankstat_identity_init(&identity);
  identity.instance = argc > 3 ? argv[3] : "outside-c";
  rankstat_permissions permissions = {0};
  permissions.struct_size = sizeof permissions;
  permissions.shm_dir = argv[1];
  rankstat_reporter* reporter = NULL;
  if (rankstat_open_ex(&identity, NULL, &permissions, &reporter) != RANKSTAT_OK) {
    fprintf(stderr, "rankstat: %s\n", rankstat_last_error());
    return 1;
  }
  const char* names[] = {"lang"};
  const char* values[] = {"c"};
  uint32_t requests = 0;
  if (rankstat_register_counter(reporter, "outside_engine_requests_total", 1, names, values, &requests) !=
      RANKSTAT_OK) {
    fprintf(stderr, "rankstat: %s\n", rankstat_last_error());
    rankstat_close(reporter);
    return 1;
  }
  rankstat_counter_add(reporter, requests, 5);

  const struct timespec tick = {0, 100000000L};
  for (int i = 0; !g_stop && i < seconds * 10; ++i) {
    rankstat_heartbeat(reporter);
    nanosleep(&tick, NULL);
  }
  rankstat_close(reporter);
  return 0;
}
