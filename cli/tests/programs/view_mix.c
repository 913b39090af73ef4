/* A program for `recorder view` (cli/tests/cli_view.rs) and its screenshots, recorded with
 * `recorder record --wall --alloc --alloc-live`: three named threads, each in one wall-clock
 * state most of the time. "cruncher" burns ~400 ms of CPU in crunch() while it allocates 4 KiB
 * blocks in churn() (freed) and keeps up to 2 MiB in keep() (never freed: the live set); "napper"
 * sleeps in nanosleep (10 x 40 ms); "waiter" waits on a condition variable that cruncher
 * signals when it is done. Exits 0. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t done_cond = PTHREAD_COND_INITIALIZER;
static int done;
static volatile unsigned long sink;
/* volatile: the stores (and so the allocations) must not be optimized away. */
static void *volatile kept[512];

static double cpu_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

__attribute__((noinline)) void churn(int n) {
    for (int i = 0; i < n; i++) {
        char *p = malloc(4096);
        p[0] = (char)i;
        sink += (unsigned char)p[0];
        free(p);
    }
}

__attribute__((noinline)) void keep(int i) {
    kept[i] = malloc(4096);
    memset((void *)kept[i], 1, 4096);
}

__attribute__((noinline)) void crunch(double ms) {
    double end = cpu_ms() + ms;
    int k = 0;
    for (long round = 0; cpu_ms() < end; round++) {
        for (int i = 0; i < 20000; i++) sink += i * i;
        churn(2);
        /* Spread over the whole run: the allocation sampler starts a little after the program. */
        if (round % 4 == 0 && k < 512) keep(k++);
    }
}

static void *cruncher(void *arg) {
    (void)arg;
    pthread_setname_np(pthread_self(), "cruncher");
    crunch(400);
    pthread_mutex_lock(&lock);
    done = 1;
    pthread_cond_broadcast(&done_cond);
    pthread_mutex_unlock(&lock);
    return NULL;
}

__attribute__((noinline)) void nap(void) {
    struct timespec req = {0, 40 * 1000 * 1000};
    nanosleep(&req, NULL);
}

static void *napper(void *arg) {
    (void)arg;
    pthread_setname_np(pthread_self(), "napper");
    for (int i = 0; i < 10; i++) nap();
    return NULL;
}

__attribute__((noinline)) void wait_for_cruncher(void) {
    pthread_mutex_lock(&lock);
    while (!done) pthread_cond_wait(&done_cond, &lock);
    pthread_mutex_unlock(&lock);
}

static void *waiter(void *arg) {
    (void)arg;
    pthread_setname_np(pthread_self(), "waiter");
    wait_for_cruncher();
    return NULL;
}

int main(void) {
    pthread_t t[3];
    pthread_create(&t[0], NULL, cruncher, NULL);
    pthread_create(&t[1], NULL, napper, NULL);
    pthread_create(&t[2], NULL, waiter, NULL);
    for (int i = 0; i < 3; i++) pthread_join(t[i], NULL);
    return 0;
}
