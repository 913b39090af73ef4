// An interpreter-style timeout on a single thread: a timer only the main thread receives
// (SIGEV_THREAD_ID) fires every 50-128 us, and its SIGALRM handler siglongjmps back to the loop,
// out of whatever it interrupted: under the recorder, possibly the sampler's SIGPROF handler.
// Prints the timeouts seen; must exit like it does without the recorder.
#define _GNU_SOURCE
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/syscall.h>
static sigjmp_buf jb;
static void on_alrm(int sig) { siglongjmp(jb, 1); }
int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 20000;
    struct sigaction sa; memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_alrm; sigemptyset(&sa.sa_mask);
    sigaction(SIGALRM, &sa, NULL);
    struct sigevent sev; memset(&sev, 0, sizeof sev);
    sev.sigev_notify = SIGEV_THREAD_ID; sev.sigev_signo = SIGALRM;
    sev._sigev_un._tid = syscall(SYS_gettid);
    timer_t t; if (timer_create(CLOCK_MONOTONIC, &sev, &t)) { perror("timer_create"); return 2; }
    volatile int done = 0;
    for (int i = 0; i < n; i++) {
        if (sigsetjmp(jb, 1) == 0) {
            struct itimerspec its = {{0, 0}, {0, 50000 + (i % 7) * 13000}};  // 50-128 us
            timer_settime(t, 0, &its, NULL);
            volatile unsigned long x = 0;
            for (;;) x++;
        }
        done++;
    }
    printf("timeouts=%d\n", done);
    return 0;
}
