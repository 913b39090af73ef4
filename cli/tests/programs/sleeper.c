/* recorder record --wall: a program that mostly sleeps. It spins a little, then sleeps in
 * nanosleep 30 times 50 ms (1.5 s); it exits 3 if a sleep fails or ends early (a wall sampler
 * must never interrupt it), else 0. */
#include <errno.h>
#include <stdio.h>
#include <time.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

__attribute__((noinline)) static unsigned long spin(double seconds) {
    double end = now() + seconds;
    volatile unsigned long x = 0;
    while (now() < end) x++;
    return x;
}

__attribute__((noinline)) static int nap(void) {
    struct timespec req = {0, 50 * 1000 * 1000};
    double t0 = now();
    if (nanosleep(&req, NULL) != 0) {
        fprintf(stderr, "nanosleep failed: errno %d\n", errno);
        return 3;
    }
    if (now() - t0 < 0.0499) {
        fprintf(stderr, "nanosleep returned early: %f s\n", now() - t0);
        return 3;
    }
    return 0;
}

int main(void) {
    spin(0.1);
    for (int i = 0; i < 30; i++) {
        if (nap() != 0) return 3;
        spin(0.001);
    }
    return 0;
}
