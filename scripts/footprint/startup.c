/* The start-up program of scripts/footprint.sh: at main's first instruction it prints the
 * CLOCK_REALTIME it reached main at, as "main_at_ns=N" (the script subtracts the time it launched
 * the command: the time before main, the recorder's start included), then burns argv[1] ms of
 * its own CPU (default 50) and exits. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static volatile double sink;

static double thread_cpu_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

__attribute__((noinline)) void burn(double until_ms) {
    while (thread_cpu_ms() < until_ms)
        for (int i = 0; i < 100000; i++) sink = sink * 0.999 + i;
}

int main(int argc, char **argv) {
    struct timespec at;
    clock_gettime(CLOCK_REALTIME, &at);
    printf("main_at_ns=%lld\n", (long long)at.tv_sec * 1000000000LL + at.tv_nsec);
    fflush(stdout);
    burn(thread_cpu_ms() + (argc > 1 ? atof(argv[1]) : 50));
    return 0;
}
