// Every thread runs its signal handlers on a small alternate stack of its own (sigaltstack,
// SA_ONSTACK), as runtimes that catch stack overflows do: the main thread sends each worker
// SIGUSR1 again and again, and the handler burns CPU there, so other signals (a profiler's
// SIGPROF) arrive while the thread runs on its alternate stack. Workers allocate between
// signals; at exit each disables and frees its alternate stack (the memory is reused).
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { THREADS = 6, SIGNALS = 40, ALTSTACK = 32 << 10 };

static volatile int handled[THREADS + 1]; // the main thread's last
static volatile int stop, ready;
static __thread int my_index = THREADS;

static void on_usr1(int sig) {
    volatile char local[256];
    for (int i = 0; i < 300000; i++) local[i % 256] += (char)i;
    __atomic_add_fetch(&handled[my_index], 1, __ATOMIC_RELEASE);
}

static void *worker(void *arg) {
    my_index = (int)(long)arg;
    stack_t ss = {.ss_sp = malloc(ALTSTACK), .ss_size = ALTSTACK, .ss_flags = 0};
    if (sigaltstack(&ss, NULL)) { perror("sigaltstack"); exit(2); }
    __atomic_add_fetch(&ready, 1, __ATOMIC_RELEASE);
    unsigned long sum = 0;
    while (!__atomic_load_n(&stop, __ATOMIC_ACQUIRE)) {
        char *p = malloc(100 + sum % 3000);
        p[0] = 1;
        sum += (unsigned long)p[0];
        free(p);
        if (++sum % 64 == 0) usleep(200);
    }
    stack_t off = {.ss_flags = SS_DISABLE};
    sigaltstack(&off, NULL);
    free(ss.ss_sp);
    return NULL;
}

int main(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_usr1;
    sa.sa_flags = SA_ONSTACK | SA_RESTART;
    sigaction(SIGUSR1, &sa, NULL);
    stack_t ss = {.ss_sp = malloc(ALTSTACK), .ss_size = ALTSTACK, .ss_flags = 0};
    sigaltstack(&ss, NULL);
    for (int round = 0; round < 2; round++) {
        pthread_t t[THREADS];
        stop = 0;
        ready = 0;
        for (long i = 0; i < THREADS; i++) { handled[i] = 0; pthread_create(&t[i], NULL, worker, (void *)i); }
        while (__atomic_load_n(&ready, __ATOMIC_ACQUIRE) < THREADS) sched_yield();
        for (int n = 1; n <= SIGNALS; n++) {
            for (int i = 0; i < THREADS; i++) {
                pthread_kill(t[i], SIGUSR1);
                while (__atomic_load_n(&handled[i], __ATOMIC_ACQUIRE) < n) usleep(100);
            }
            raise(SIGUSR1);
        }
        __atomic_store_n(&stop, 1, __ATOMIC_RELEASE);
        int total = 0;
        for (int i = 0; i < THREADS; i++) { pthread_join(t[i], NULL); total += handled[i]; }
        printf("round %d: %d handlers ran on %d alternate stacks\n", round, total, THREADS);
    }
    return 0;
}
