/* The program a wrapper (a shell script shim, `env`, `sh -c 'exec ...'`) execs in
 * cli/tests/record.rs: from the entry of main, it burns argv[1] ms of its own CPU time (default
 * 600) in busy_hot_loop, so the sample count does not depend on how loaded the machine is, then
 * prints "busy done". (The thread's CPU clock, read at the start: a process's and a thread's CPU
 * time go on across exec, and the wrapper's, the recorder's included, must not count.)
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static volatile double sink;

static double cpu_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

__attribute__((noinline)) double busy_hot_loop(long n) {
    double s = 0;
    for (long i = 0; i < n; i++) s = s * 0.999999 + (double)(i ^ (i >> 3));
    return s;
}

int main(int argc, char **argv) {
    double until = cpu_ms() + (argc > 1 ? atof(argv[1]) : 600);
    while (cpu_ms() < until) sink += busy_hot_loop(200000);
    printf("busy done\n");
    return 0;
}
