/* A known call tree for `recorder record` tests, built with -O2 -fomit-frame-pointer:
 *   main -> run -> level1 -> level2 -> hot_leaf   (almost all CPU time)
 *   main -> run -> cold_leaf                      (a little)
 * It burns CPU until its own CPU time reaches argv[1] ms (default 1500), so the sample count
 * does not depend on how loaded the machine is. Optional argv[2]: "exit", "_exit", "kill",
 * "fork", "threads" change how it ends or what it runs; the exit status is argv[3] (default 7).
 * "iterations" runs argv[1] iterations of run's loop instead (fixed work, for benchmarks).
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static volatile double sink;

static double cpu_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

__attribute__((noinline)) double hot_leaf(long n) {
    double s = 0;
    for (long i = 0; i < n; i++) s = s * 0.999999 + (double)(i ^ (i >> 3));
    return s;
}

__attribute__((noinline)) double cold_leaf(long n) {
    double s = 1;
    for (long i = 0; i < n; i++) s = s * 1.000001 + 1;
    return s;
}

__attribute__((noinline)) double level2(long n) { return hot_leaf(n) * 0.5 + 1.0; }
__attribute__((noinline)) double level1(long n) { return level2(n) * 0.5 + 2.0; }

__attribute__((noinline)) void run(double until_ms) {
    while (cpu_ms() < until_ms) {
        sink += level1(2000000);
        sink += cold_leaf(20000);
    }
}

static void *thread_main(void *arg) {
    run(*(double *)arg);
    return NULL;
}

int main(int argc, char **argv) {
    double ms = argc > 1 ? atof(argv[1]) : 1500;
    const char *how = argc > 2 ? argv[2] : "return";
    int status = argc > 3 ? atoi(argv[3]) : 7;
    if (strcmp(how, "iterations") == 0) {
        /* A fixed amount of work (argv[1] iterations of run's loop), for timing overhead. */
        static volatile long n = 2000000; /* read each time: the calls cannot be merged */
        for (long i = 0; i < (long)ms; i++) {
            sink += level1(n);
            sink += cold_leaf(n / 100);
        }
        return 0;
    }
    if (strcmp(how, "threads") == 0) {
        pthread_t t[2];
        for (int i = 0; i < 2; i++) pthread_create(&t[i], NULL, thread_main, &ms);
        for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
        return status;
    }
    if (strcmp(how, "fork") == 0) {
        /* Children that fork without exec work a little and leave with exit() (running the
         * preload's exit handler in a process that is not the recording's). */
        for (int i = 0; i < 3; i++) {
            pid_t p = fork();
            if (p == 0) {
                run(cpu_ms() + 100);
                exit(0);
            }
        }
        run(ms);
        while (wait(NULL) > 0) {}
        return status;
    }
    run(ms);
    if (strcmp(how, "_exit") == 0) _exit(status);
    if (strcmp(how, "kill") == 0) {
        /* Let a flush publish what was sampled, then die without any exit handler. */
        sleep(2);
        kill(getpid(), SIGKILL);
    }
    if (strcmp(how, "wait-signal") == 0) {
        printf("ready\n");
        fflush(stdout);
        for (;;) pause();
    }
    if (strcmp(how, "exit") == 0) exit(status);
    return status;
}
