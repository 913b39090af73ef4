// An interpreter-style timeout: a one-shot process-directed ITIMER_REAL, a spin, and a
// siglongjmp out of the SIGALRM handler. Correct in a single-threaded program, as long as the
// handler runs on the thread that called sigsetjmp.
#define _GNU_SOURCE
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <unistd.h>

static sigjmp_buf jump_buffer;
static volatile sig_atomic_t wrong_thread;

static void on_alarm(int sig) {
    if (syscall(SYS_gettid) != getpid()) wrong_thread++;
    siglongjmp(jump_buffer, 1);
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 500;
    signal(SIGALRM, on_alarm);
    volatile int done = 0;
    for (int i = 0; i < n; i++) {
        if (sigsetjmp(jump_buffer, 1) == 0) {
            struct itimerval once = {{0, 0}, {0, 1000}};
            setitimer(ITIMER_REAL, &once, NULL);
            volatile unsigned long x = 0;
            for (;;) x++;
        }
        done++;
    }
    printf("timeouts=%d wrong_thread=%d\n", done, (int)wrong_thread);
    return wrong_thread != 0;
}
