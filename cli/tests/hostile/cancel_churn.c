// Thread churn with deferred cancellation: bursts of short threads that exit at once keep thread
// slots of a library's bookkeeping held by exited threads, and threads cancelled right after
// pthread_create are cancelled wherever they are, including in code that runs before their start
// routine (a cancellation point there must not unwind through a frame that catches it).
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static void *quick(void *arg) {
    volatile int x = 0;
    for (int i = 0; i < 1000; i++) x += i;
    return NULL;
}

static void *victim(void *arg) {
    for (;;) { pthread_testcancel(); usleep(100); }
}

int main(int argc, char **argv) {
    int rounds = argc > 1 ? atoi(argv[1]) : 150;
    pthread_t q[48], v[16];
    int cancelled = 0;
    for (int r = 0; r < rounds; r++) {
        for (int i = 0; i < 48; i++) pthread_create(&q[i], NULL, quick, NULL);
        for (int i = 0; i < 16; i++) { pthread_create(&v[i], NULL, victim, NULL); pthread_cancel(v[i]); }
        for (int i = 0; i < 48; i++) pthread_join(q[i], NULL);
        for (int i = 0; i < 16; i++) { void *res; pthread_join(v[i], &res); cancelled += res == PTHREAD_CANCELED; }
    }
    printf("rounds=%d cancelled=%d\n", rounds, cancelled);
    return 0;
}
