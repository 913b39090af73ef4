// Many short threads: some return, some pthread_exit, some are cancelled, some detached; each
// allocates and burns a little CPU; a thread-specific destructor allocates at exit.
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static pthread_key_t key;
static void destructor(void *p) { void *q = malloc(333); free(q); free(p); }

static void *body(void *arg) {
    long i = (long)arg;
    pthread_setspecific(key, malloc(100));
    volatile unsigned long x = 0;
    for (int k = 0; k < 20000 + (i % 7) * 5000; k++) x += k;
    void *p = malloc(64 + i % 4096);
    free(p);
    if (i % 3 == 1) pthread_exit((void *)x);
    if (i % 3 == 2 && i % 11 != 0) { for (;;) { pthread_testcancel(); usleep(200); } }
    return (void *)x;
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 5000;
    pthread_key_create(&key, destructor);
    pthread_t t[64];
    int failed = 0, detached = 0;
    for (int i = 0; i < n; i += 64) {
        int m = 0;
        for (int j = 0; j < 64 && i + j < n; j++, m++) {
            long id = i + j;
            pthread_attr_t a;
            pthread_attr_init(&a);
            if (id % 11 == 0) pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
            if (pthread_create(&t[j], &a, body, (void *)id) != 0) { failed++; t[j] = 0; }
            pthread_attr_destroy(&a);
            if (id % 11 == 0) { t[j] = 0; detached++; }
        }
        for (int j = 0; j < m; j++) {
            if (!t[j]) continue;
            if ((i + j) % 3 == 2) pthread_cancel(t[j]);
            pthread_join(t[j], NULL);
        }
    }
    usleep(100000);
    printf("threads=%d detached=%d failed=%d\n", n, detached, failed);
    return failed != 0;
}
