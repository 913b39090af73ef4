/* `bsd_signal` and `sysv_signal` under `recorder record`: after main started (the recorder's
 * SIGPROF handler is installed), argv[1] = "bsd" or "sysv" installs the program's own SIGPROF
 * handler with that function (the System V handler re-installs itself, as System V programs
 * do), runs its own setitimer(ITIMER_PROF) profiler, burns argv[2] ms of CPU in
 * main -> work -> spin and prints
 *   old=dfl|other own=N query=ok|wrong
 * old: what the function returned (the previous disposition the program can know of: SIG_DFL);
 * own: calls of its handler; query: sigaction(SIGPROF, NULL, &old) reports its handler. */
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

extern __sighandler_t bsd_signal(int, __sighandler_t);

static volatile sig_atomic_t own;
static volatile double sink;
static int sysv;

static void on_prof(int sig) {
    own++;
    if (sysv) sysv_signal(sig, on_prof);
}

static double cpu_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

__attribute__((noinline)) double spin(long n) {
    double s = 0;
    for (long i = 0; i < n; i++) s = s * 0.999999 + (double)(i ^ (i >> 3));
    return s;
}

__attribute__((noinline)) void work(double until_ms) {
    while (cpu_ms() < until_ms) sink += spin(1000000);
}

int main(int argc, char **argv) {
    if (argc < 3) return 2;
    sysv = strcmp(argv[1], "sysv") == 0;
    __sighandler_t old = sysv ? sysv_signal(SIGPROF, on_prof) : bsd_signal(SIGPROF, on_prof);
    struct itimerval it = {{0, 10000}, {0, 10000}};
    setitimer(ITIMER_PROF, &it, NULL);
    work(atof(argv[2]));
    struct itimerval off = {{0, 0}, {0, 0}};
    setitimer(ITIMER_PROF, &off, NULL);
    struct sigaction now;
    sigaction(SIGPROF, NULL, &now);
    printf("old=%s own=%d query=%s\n", old == SIG_DFL ? "dfl" : "other", (int)own,
           now.sa_handler == on_prof ? "ok" : "wrong");
    return 0;
}
