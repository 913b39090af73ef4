/* Start-up of a recorded program: at main's first instruction it prints the CPU time its main
 * thread spent before main (the loader, constructors and the preloaded recorder's start), as
 *   premain_cpu_us=N
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
    double premain = thread_cpu_ms();
    printf("premain_cpu_us=%ld\n", (long)(premain * 1000));
    fflush(stdout);
    burn(premain + (argc > 1 ? atof(argv[1]) : 200));
    return 0;
}
