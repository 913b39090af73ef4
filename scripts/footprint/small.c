/* The small program of scripts/footprint.sh: two functions, no allocation. It alternates
 * between them for argv[1] seconds of wall time (default 60), then prints its own memory from
 * /proc/self/status (VmRSS, VmHWM, RssAnon, RssFile) on stdout, read and written with plain
 * system calls (no stdio buffer), and exits: the figures are taken while the recorder, if
 * preloaded, is still running, so they hold what it added to the process.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static volatile double sink;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

__attribute__((noinline)) double first_work(long n) {
    double s = 0;
    for (long i = 0; i < n; i++) s = s * 0.999999 + (double)(i ^ (i >> 3));
    return s;
}

__attribute__((noinline)) double second_work(long n) {
    double s = 1;
    for (long i = 0; i < n; i++) s = s * 0.999998 + (double)(i & 7);
    return s;
}

static void print_status(void) {
    static char buf[8192];
    int fd = open("/proc/self/status", O_RDONLY);
    if (fd < 0) return;
    ssize_t len = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (len <= 0) return;
    buf[len] = 0;
    for (char *line = buf; line && *line;) {
        char *end = strchr(line, '\n');
        size_t n = end ? (size_t)(end - line + 1) : strlen(line);
        if (!strncmp(line, "VmRSS:", 6) || !strncmp(line, "VmHWM:", 6) || !strncmp(line, "RssAnon:", 8) ||
            !strncmp(line, "RssFile:", 8))
            (void)!write(1, line, n);
        line = end ? end + 1 : 0;
    }
}

int main(int argc, char **argv) {
    double until = now_s() + (argc > 1 ? atof(argv[1]) : 60);
    while (now_s() < until) {
        sink += first_work(100000);
        sink += second_work(100000);
    }
    print_status();
    return 0;
}
