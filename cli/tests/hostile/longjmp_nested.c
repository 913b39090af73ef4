// A thread-directed timer (SIGEV_THREAD_ID: only the main thread gets it) whose handler
// siglongjmps back to the main loop: a well-defined single-threaded timeout. Whatever other
// handler the SIGALRM interrupts on that thread is abandoned half way, so that handler must block
// SIGALRM (or survive being abandoned).
#define _GNU_SOURCE
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static sigjmp_buf jump_buffer;
static void on_alarm(int sig) { siglongjmp(jump_buffer, 1); }

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 10000;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_alarm;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGALRM, &sa, NULL);
    struct sigevent sev;
    memset(&sev, 0, sizeof sev);
    sev.sigev_notify = SIGEV_THREAD_ID;
    sev.sigev_signo = SIGALRM;
    sev._sigev_un._tid = syscall(SYS_gettid);
    timer_t timer;
    if (timer_create(CLOCK_MONOTONIC, &sev, &timer)) { perror("timer_create"); return 2; }
    volatile int done = 0;
    for (int i = 0; i < n; i++) {
        if (sigsetjmp(jump_buffer, 1) == 0) {
            struct itimerspec once = {{0, 0}, {0, 50000 + (i % 7) * 13000}}; // 50-128 us
            timer_settime(timer, 0, &once, NULL);
            volatile unsigned long x = 0;
            for (;;) x++;
        }
        done++;
    }
    printf("timeouts=%d\n", done);
    return 0;
}
