/*
 * Moves the wall clock of the process it is preloaded into (LD_PRELOAD) by the milliseconds
 * written in the file WASMGEAR_CLOCK_FILE names (a decimal, negative to go back), read on
 * every call: the model test (tests/all/model.rs) moves a real redis-server's clock forward
 * and back under the queue's library. Only the wall clock moves (CLOCK_REALTIME, and
 * gettimeofday and time, which read it); monotonic clocks are left alone. It calls the
 * kernel directly, allocating nothing, so that it works before the allocator is up.
 */
#define _GNU_SOURCE
#include <sys/syscall.h>
#include <unistd.h>
#include <time.h>
#include <sys/time.h>
#include <fcntl.h>
#include <stdlib.h>

static long long offset_ms(void) {
  const char *path = getenv("WASMGEAR_CLOCK_FILE");
  if (!path) return 0;
  int fd = (int)syscall(SYS_open, path, O_RDONLY);
  if (fd < 0) return 0;
  char buf[32];
  long n = syscall(SYS_read, fd, buf, sizeof buf - 1);
  syscall(SYS_close, fd);
  if (n <= 0) return 0;
  long long v = 0; int i = 0, neg = 0;
  if (buf[0] == '-') { neg = 1; i = 1; }
  for (; i < n && buf[i] >= '0' && buf[i] <= '9'; i++) v = v * 10 + (buf[i] - '0');
  return neg ? -v : v;
}

int clock_gettime(clockid_t id, struct timespec *ts) {
  int r = (int)syscall(SYS_clock_gettime, id, ts);
  if (r == 0 && (id == CLOCK_REALTIME || id == CLOCK_REALTIME_COARSE)) {
    long long ns = (long long)ts->tv_sec * 1000000000LL + ts->tv_nsec + offset_ms() * 1000000LL;
    ts->tv_sec = ns / 1000000000LL;
    ts->tv_nsec = ns % 1000000000LL;
  }
  return r;
}

int gettimeofday(struct timeval *tv, void *tz) {
  (void)tz;
  struct timespec ts;
  int r = clock_gettime(CLOCK_REALTIME, &ts);
  if (r == 0 && tv) { tv->tv_sec = ts.tv_sec; tv->tv_usec = ts.tv_nsec / 1000; }
  return r;
}

time_t time(time_t *t) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  if (t) *t = ts.tv_sec;
  return ts.tv_sec;
}
