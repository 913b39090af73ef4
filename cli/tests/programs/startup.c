/* Start-up of a recorded program: at main's first instruction it prints the CPU time its main
 * thread spent before main (the loader, constructors and the preloaded recorder's start) and the
 * CLOCK_REALTIME it reached main at (scripts/footprint.sh subtracts the time it launched it), as
 *   premain_cpu_us=N
 *   main_at_ns=N
 * then burns argv[1] ms of CPU in main -> burn (built with -O2 -fomit-frame-pointer). */
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
        for (int i = 0; i < 1000000; i++) sink = sink * 0.999 + i;
}

int main(int argc, char **argv) {
    struct timespec at;
    clock_gettime(CLOCK_REALTIME, &at);
    double premain = thread_cpu_ms();
    printf("premain_cpu_us=%ld\n", (long)(premain * 1000));
    printf("main_at_ns=%lld\n", (long long)at.tv_sec * 1000000000LL + at.tv_nsec);
    fflush(stdout);
    burn(premain + (argc > 1 ? atof(argv[1]) : 200));
    return 0;
}
