// SIGPROF blocked in every thread from the start of main (threads inherit the mask) while they
// burn CPU and allocate; new threads start and end meanwhile. A profiler's signals stay pending
// for the whole run: nothing may wait for a handler that never runs, at thread exit or at the
// end of the process.
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void *worker(void *arg) {
    unsigned long id = (unsigned long)arg, sum = id;
    for (int i = 0; i < 200000; i++) {
        char *p = malloc(32 + (i * 31 + id) % 4000);
        p[0] = (char)i;
        sum = sum * 33 + (unsigned char)p[0];
        free(p);
    }
    return (void *)sum;
}

int main(void) {
    sigset_t prof;
    sigemptyset(&prof);
    sigaddset(&prof, SIGPROF);
    pthread_sigmask(SIG_BLOCK, &prof, NULL);
    unsigned long total = 0;
    for (int round = 0; round < 6; round++) {
        pthread_t t[4];
        for (long i = 0; i < 4; i++) pthread_create(&t[i], NULL, worker, (void *)(round * 4 + i));
        for (int i = 0; i < 4; i++) { void *r; pthread_join(t[i], &r); total ^= (unsigned long)r; }
    }
    sigset_t mask;
    pthread_sigmask(SIG_BLOCK, NULL, &mask);
    printf("checksum=%lu SIGPROF still blocked: %s\n", total, sigismember(&mask, SIGPROF) ? "yes" : "no");
    return 0;
}
