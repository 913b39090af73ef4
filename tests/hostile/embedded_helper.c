// C half of tests/hostile_embedded.rs: what a program embedding the recorder may do that Rust
// cannot express safely (sigsetjmp/siglongjmp) or that must go through a C module's own
// pthread_create GOT slot (which the recorder patches). Built into a shared library by the test
// and loaded with dlopen before the recorder starts.
#define _GNU_SOURCE
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static sigjmp_buf jump_buffer;
static void on_alarm_jump(int sig) { siglongjmp(jump_buffer, 1); }

// n timeouts of 50-128 us from a timer directed at the calling thread, each ended by a
// siglongjmp out of the SIGALRM handler, which has an empty mask: whatever handler SIGALRM
// interrupts on this thread (the recorder's SIGPROF handler) is abandoned half way. Returns how
// many timeouts fired, -1 if the timer cannot be made.
int hostile_longjmp_timeouts(int n) {
    struct sigaction sa, old;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_alarm_jump;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGALRM, &sa, &old);
    struct sigevent sev;
    memset(&sev, 0, sizeof sev);
    sev.sigev_notify = SIGEV_THREAD_ID;
    sev.sigev_signo = SIGALRM;
    sev._sigev_un._tid = syscall(SYS_gettid);
    timer_t timer;
    if (timer_create(CLOCK_MONOTONIC, &sev, &timer)) return -1;
    volatile int done = 0;
    for (int i = 0; i < n; i++) {
        if (sigsetjmp(jump_buffer, 1) == 0) {
            struct itimerspec once = {{0, 0}, {0, 50000 + (i % 7) * 13000}};
            timer_settime(timer, 0, &once, NULL);
            volatile unsigned long x = 0;
            for (;;) x++;
        }
        done++;
    }
    timer_delete(timer);
    sigaction(SIGALRM, &old, NULL);
    return done;
}

static volatile int on_recorder_threads;
static char first_thread[32];

static void on_alarm_count(int sig) {
    char path[64], comm[32] = "";
    snprintf(path, sizeof path, "/proc/self/task/%ld/comm", (long)syscall(SYS_gettid));
    FILE *f = fopen(path, "r");
    if (f) { if (!fgets(comm, sizeof comm, f)) comm[0] = 0; fclose(f); }
    if (!strncmp(comm, "recorder", 8) && !on_recorder_threads++) memcpy(first_thread, comm, sizeof comm);
}

// A process-directed SIGALRM every millisecond for ms milliseconds while the caller burns CPU;
// returns how many times the handler ran on a thread whose name starts with "recorder" (the
// first one's name in *name).
int hostile_alarms_on_recorder_threads(int ms, const char **name) {
    struct sigaction sa, old;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_alarm_count;
    sa.sa_flags = SA_RESTART;
    sigaction(SIGALRM, &sa, &old);
    struct itimerval every = {{0, 1000}, {0, 1000}}, off = {{0, 0}, {0, 0}};
    setitimer(ITIMER_REAL, &every, NULL);
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    volatile unsigned long x = 0;
    do {
        for (int i = 0; i < 10000; i++) x += i;
        clock_gettime(CLOCK_MONOTONIC, &b);
    } while ((b.tv_sec - a.tv_sec) * 1000 + (b.tv_nsec - a.tv_nsec) / 1000000 < ms);
    setitimer(ITIMER_REAL, &off, NULL);
    // A last tick may still be pending on a thread that has not run yet (the kernel gives a
    // process-directed signal to a sleeping thread too): SIG_IGN discards it before the old
    // action (SIG_DFL: terminate) is back.
    struct sigaction ignore;
    memset(&ignore, 0, sizeof ignore);
    ignore.sa_handler = SIG_IGN;
    sigaction(SIGALRM, &ignore, NULL);
    sigaction(SIGALRM, &old, NULL);
    *name = first_thread;
    return on_recorder_threads;
}

static void *quick(void *arg) { volatile int x = 0; for (int i = 0; i < 1000; i++) x += i; return NULL; }
static void *victim(void *arg) { for (;;) { pthread_testcancel(); usleep(100); } }

// Bursts of short threads and threads cancelled right after pthread_create (this module's
// pthread_create: its GOT slot is the recorder's hook). Returns how many were cancelled.
int hostile_cancel_churn(int rounds) {
    int cancelled = 0;
    for (int r = 0; r < rounds; r++) {
        pthread_t q[24], v[8];
        for (int i = 0; i < 24; i++) pthread_create(&q[i], NULL, quick, NULL);
        for (int i = 0; i < 8; i++) { pthread_create(&v[i], NULL, victim, NULL); pthread_cancel(v[i]); }
        for (int i = 0; i < 24; i++) pthread_join(q[i], NULL);
        for (int i = 0; i < 8; i++) { void *res; pthread_join(v[i], &res); cancelled += res == PTHREAD_CANCELED; }
    }
    return cancelled;
}
