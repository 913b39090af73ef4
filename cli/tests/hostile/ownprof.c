// A program with its own profiler: its SIGPROF handler (plain or SA_SIGINFO, argv[1] "siginfo")
// and ITIMER_PROF get their ticks; a SIGUSR1 handler burns CPU on a sigaltstack; SIGALRM
// handlers siglongjmp out of a CPU loop; at the end the program stops its timer and restores
// SIGPROF's default action, and burns on: nothing may send it a SIGPROF then.
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>

static volatile long prof_ticks;
static void on_prof(int sig) { prof_ticks++; }
static void on_prof_info(int sig, siginfo_t *si, void *uc) { prof_ticks++; }

static void burn(unsigned long n) {
    volatile unsigned long x = 0;
    for (unsigned long i = 0; i < n; i++) x += i;
}

static void on_usr1(int sig) { burn(30000000UL); }

static sigjmp_buf jump_buffer;
static volatile int jumps;
static void on_alarm(int sig) { jumps++; siglongjmp(jump_buffer, 1); }

int main(int argc, char **argv) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    if (argc > 1 && !strcmp(argv[1], "siginfo")) {
        sa.sa_sigaction = on_prof_info;
        sa.sa_flags = SA_SIGINFO | SA_RESTART;
    } else {
        sa.sa_handler = on_prof;
        sa.sa_flags = SA_RESTART;
    }
    sigaction(SIGPROF, &sa, NULL);
    struct itimerval every_10ms = {{0, 10000}, {0, 10000}};
    setitimer(ITIMER_PROF, &every_10ms, NULL);
    burn(200000000UL);
    printf("own SIGPROF handler got ticks: %s\n", prof_ticks > 0 ? "yes" : "no");

    stack_t ss = {.ss_sp = malloc(1 << 16), .ss_size = 1 << 16, .ss_flags = 0};
    sigaltstack(&ss, NULL);
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_usr1;
    sa.sa_flags = SA_ONSTACK;
    sigaction(SIGUSR1, &sa, NULL);
    for (int i = 0; i < 5; i++) raise(SIGUSR1);
    printf("altstack handler done\n");

    signal(SIGALRM, on_alarm);
    for (int i = 0; i < 20; i++) {
        if (sigsetjmp(jump_buffer, 1) == 0) {
            struct itimerval once = {{0, 0}, {0, 20000}};
            setitimer(ITIMER_REAL, &once, NULL);
            for (;;) burn(1000);
        }
    }
    printf("longjmps: %d\n", jumps);

    struct itimerval off = {{0, 0}, {0, 0}};
    setitimer(ITIMER_PROF, &off, NULL);
    signal(SIGPROF, SIG_DFL);
    burn(100000000UL);
    printf("done\n");
    return 0;
}
