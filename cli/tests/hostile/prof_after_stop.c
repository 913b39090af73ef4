// The program installs its own SIGPROF handler and ITIMER_PROF; a recording that stops early
// (recorded with --duration 1s) while the program goes on must leave it its handler and ticks.
#include <signal.h>
#include <stdio.h>
#include <sys/time.h>
#include <time.h>

static volatile long ticks;
static void on_prof(int sig) { ticks++; }

static void burn_seconds(double s) {
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    volatile unsigned long x = 0;
    do {
        for (int i = 0; i < 100000; i++) x += i;
        clock_gettime(CLOCK_MONOTONIC, &b);
    } while ((b.tv_sec - a.tv_sec) + (b.tv_nsec - a.tv_nsec) / 1e9 < s);
}

int main(void) {
    signal(SIGPROF, on_prof);
    struct itimerval every_10ms = {{0, 10000}, {0, 10000}};
    setitimer(ITIMER_PROF, &every_10ms, NULL);
    burn_seconds(0.5);
    long during = ticks;
    burn_seconds(1.0); // the recording stops at 1 s
    ticks = 0;
    burn_seconds(1.0);
    long after = ticks;
    struct sigaction current;
    sigaction(SIGPROF, NULL, &current);
    printf("ticks at first: %s; after 1.5 s: %s; the handler is the program's: %s\n", during > 0 ? "yes" : "no",
           after > 0 ? "yes" : "no", current.sa_handler == on_prof ? "yes" : "no");
    return 0;
}
