// A single-threaded program's process-directed signals (an interval timer's SIGALRM, SIGUSR1
// sent to the process, SIGCHLD of its children) must run its handlers on its only thread, never
// on a thread a library started.
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static volatile sig_atomic_t elsewhere, first_sig;
static volatile pid_t first_tid;

static void on_signal(int sig) {
    pid_t tid = syscall(SYS_gettid);
    if (tid != getpid() && !elsewhere++) { first_sig = sig; first_tid = tid; }
}

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

int main(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sa.sa_flags = SA_RESTART;
    sigaction(SIGALRM, &sa, NULL);
    sigaction(SIGUSR1, &sa, NULL);
    sigaction(SIGCHLD, &sa, NULL);
    struct itimerval it = {{0, 1000}, {0, 1000}};
    setitimer(ITIMER_REAL, &it, NULL);
    double end = now() + 1.0;
    volatile unsigned long x = 0;
    for (int i = 0; now() < end; i++) {
        for (int k = 0; k < 100000; k++) x += k;
        kill(getpid(), SIGUSR1);
        if (i % 50 == 0) {
            pid_t c = fork();
            if (c == 0) _exit(0);
            while (waitpid(c, NULL, 0) < 0) {}
        }
    }
    struct itimerval off = {{0, 0}, {0, 0}};
    setitimer(ITIMER_REAL, &off, NULL);
    if (elsewhere) {
        char path[64], comm[32] = "?";
        snprintf(path, sizeof path, "/proc/self/task/%d/comm", (int)first_tid);
        FILE *f = fopen(path, "r");
        if (f) { if (!fgets(comm, sizeof comm, f)) strcpy(comm, "?"); fclose(f); }
        fprintf(stderr, "%ld handler runs on other threads, the first (signal %d) on %s", (long)elsewhere, (int)first_sig, comm);
    }
    printf("signal handlers ran on the main thread only: %s\n", elsewhere ? "no" : "yes");
    return elsewhere != 0;
}
