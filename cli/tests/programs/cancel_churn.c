// Thread churn with deferred cancellation: rounds of 48 short threads that exit at once (so the
// recorder's sampler slots fill with threads that exited and wait to be reaped) and 16 threads
// cancelled right after pthread_create, i.e. while their start may still be in the recorder's
// thread-start hook. Prints "rounds=N ok".
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
static void *quick(void *a) { volatile int x = 0; for (int i = 0; i < 1000; i++) x += i; return NULL; }
static void *victim(void *a) { for (;;) { pthread_testcancel(); usleep(100); } }
int main(int argc, char **argv) {
    int rounds = argc > 1 ? atoi(argv[1]) : 300;
    pthread_t q[48], v[16];
    for (int r = 0; r < rounds; r++) {
        for (int i = 0; i < 48; i++) pthread_create(&q[i], NULL, quick, NULL);
        for (int i = 0; i < 16; i++) { pthread_create(&v[i], NULL, victim, NULL); pthread_cancel(v[i]); }
        for (int i = 0; i < 48; i++) pthread_join(q[i], NULL);
        for (int i = 0; i < 16; i++) pthread_join(v[i], NULL);
    }
    printf("rounds=%d ok\n", rounds);
    return 0;
}
