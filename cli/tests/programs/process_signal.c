// A single-threaded program that blocks SIGUSR1, sends it to its own process, and unblocks it a
// moment later, 40 times: each time its handler must run on its only thread, once the signal is
// unblocked there. Prints where the handler ran; exits 1 if it ever ran on another thread (whose
// name it prints).
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static volatile sig_atomic_t handled, elsewhere;
static char where[64];

static void on_usr1(int sig) {
    (void)sig;
    if (syscall(SYS_gettid) != getpid()) {
        if (!elsewhere) {
            char path[64];
            snprintf(path, sizeof path, "/proc/self/task/%ld/comm", (long)syscall(SYS_gettid));
            FILE *f = fopen(path, "r");
            if (f) { if (!fgets(where, sizeof where, f)) where[0] = 0; fclose(f); }
        }
        elsewhere++;
    }
    handled++;
}

int main(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_usr1;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGUSR1, &sa, NULL);
    sigset_t usr1;
    sigemptyset(&usr1);
    sigaddset(&usr1, SIGUSR1);
    for (int i = 0; i < 40; i++) {
        sigprocmask(SIG_BLOCK, &usr1, NULL);
        kill(getpid(), SIGUSR1);
        struct timespec ms2 = {0, 2000000};
        nanosleep(&ms2, NULL);
        sigprocmask(SIG_UNBLOCK, &usr1, NULL);
        while (handled <= i) sched_yield();
    }
    printf("handled=%d elsewhere=%d %s\n", (int)handled, (int)elsewhere, where);
    return elsewhere != 0;
}
