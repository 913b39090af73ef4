// Short threads in batches of 64 (no cancellation): half return, half pthread_exit; a
// thread-specific destructor allocates at exit.
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

static pthread_key_t key;
static void destructor(void *p) { void *q = malloc(333); free(q); free(p); }

static void *body(void *arg) {
    long i = (long)arg;
    pthread_setspecific(key, malloc(100));
    volatile unsigned long x = 0;
    for (int k = 0; k < 20000; k++) x += k;
    if (i & 1) pthread_exit(NULL);
    return NULL;
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 5000;
    pthread_key_create(&key, destructor);
    pthread_t t[64];
    int failed = 0;
    for (int i = 0; i < n; i += 64) {
        for (int j = 0; j < 64; j++) failed += pthread_create(&t[j], NULL, body, (void *)(long)(i + j)) != 0;
        for (int j = 0; j < 64; j++) pthread_join(t[j], NULL);
    }
    printf("threads=%d failed=%d\n", n, failed);
    return failed != 0;
}
