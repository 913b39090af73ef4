/* The program's own signal handlers under `recorder record`. After main started
 * (so after the recorder installed its SIGPROF handler) it installs a SIGUSR1 handler and its own
 * SIGPROF profiler: sigaction(SA_SIGINFO) + setitimer(ITIMER_PROF). It burns argv[1] ms of CPU in
 * main -> work -> spin and prints what its handlers saw:
 *   usr1=N own=N foreign=N query=ok|wrong
 * own: SIGPROFs of its itimer (si_code SI_KERNEL); foreign: any other SIGPROF (the sampler's
 * perf events or timers, which must never reach it); query: sigaction(SIGPROF, NULL, &old)
 * reports its own handler. Built with -O2 -fomit-frame-pointer. */
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

static volatile sig_atomic_t usr1, own, foreign;
static volatile double sink;

static void on_usr1(int sig) { (void)sig; usr1++; }

static void on_prof(int sig, siginfo_t *info, void *ctx) {
    (void)sig; (void)ctx;
    if (info->si_code == SI_KERNEL) own++;
    else foreign++;
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
    double ms = argc > 1 ? atof(argv[1]) : 1000;
    signal(SIGUSR1, on_usr1);
    struct sigaction act;
    memset(&act, 0, sizeof act);
    act.sa_sigaction = on_prof;
    act.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&act.sa_mask);
    if (sigaction(SIGPROF, &act, NULL) != 0) return 3;
    struct sigaction now;
    sigaction(SIGPROF, NULL, &now);
    int query_ok = now.sa_sigaction == on_prof && (now.sa_flags & SA_SIGINFO);
    struct itimerval it = {{0, 10000}, {0, 10000}};
    setitimer(ITIMER_PROF, &it, NULL);
    raise(SIGUSR1);
    work(ms);
    struct itimerval off = {{0, 0}, {0, 0}};
    setitimer(ITIMER_PROF, &off, NULL);
    printf("usr1=%d own=%d foreign=%d query=%s\n", (int)usr1, (int)own, (int)foreign, query_ok ? "ok" : "wrong");
    return 0;
}
