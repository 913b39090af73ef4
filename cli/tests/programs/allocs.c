/* A known allocation pattern for `recorder record --alloc` tests (built with -O2, no frame
 * pointers asked for). Each site allocates a known number of bytes through one entry point of
 * the C allocator:
 *   leak_site       malloc 4096 B x 8192 = 32 MiB, never freed (the live set's top)
 *   churn_site      malloc 4096 B x 32768 = 128 MiB, each freed at once
 *   calloc_site     calloc 1 x 65536 B x 1024 = 64 MiB, freed
 *   aligned_site    posix_memalign(64) 16384 B x 2048 = 32 MiB, aligned_alloc(256) 16384 B x 2048
 *                   = 32 MiB, memalign(128) 16384 B x 2048 = 32 MiB, all freed
 *   realloc_site    realloc growing 4 KiB -> 256 KiB in 4 KiB steps, 32 rounds; a realloc is
 *                   sampled as an allocation of its new size: 32 x 2080 x 4 KiB = 260 MiB, freed
 *   valloc_site     valloc 8192 B x 1024 = 8 MiB, pvalloc 8192 B x 1024 = 8 MiB, freed
 *   array_site      reallocarray(NULL, 1024, 32) x 1024 = 32 MiB, freed
 * Every block is checked with malloc_usable_size (it must cover what was asked) and alignment;
 * a failure exits with status 3. Optional argv[1]: "cpu" also burns ~300 ms of CPU in burn();
 * "edge" also allocates where a hook must not break anything: in a constructor before main, in
 * a signal handler (raised outside any allocation), in a thread's TLS destructors at its exit
 * (8 threads), and in a forked child (which exits with status 0 if its allocations worked).
 * "bench N": only an allocation-heavy loop for overhead measurements (scripts/bench-record-alloc.sh):
 * N rounds of 1 Mi malloc/free pairs of 16..1039 bytes through a ring of 4096 live blocks.
 */
#define _GNU_SOURCE
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define REALLOC_STEP 4096
#define REALLOC_STEPS 64
#define REALLOC_ROUNDS 32

static void **kept;
static volatile unsigned long sink;

static void check(void *p, size_t size, size_t align) {
    if (p == NULL || malloc_usable_size(p) < size || ((uintptr_t)p % align) != 0) {
        fprintf(stderr, "allocs: bad block %p (size %zu, align %zu, usable %zu)\n", p, size, align,
                p ? malloc_usable_size(p) : 0);
        exit(3);
    }
    ((volatile char *)p)[0] = 1;
    ((volatile char *)p)[size - 1] = 2;
}

__attribute__((noinline)) void leak_site(void) {
    kept = malloc(8192 * sizeof(void *));
    for (int i = 0; i < 8192; i++) {
        kept[i] = malloc(4096);
        check(kept[i], 4096, 16);
    }
}

__attribute__((noinline)) void churn_site(void) {
    for (int i = 0; i < 32768; i++) {
        void *p = malloc(4096);
        check(p, 4096, 16);
        free(p);
    }
}

__attribute__((noinline)) void calloc_site(void) {
    for (int i = 0; i < 1024; i++) {
        unsigned char *p = calloc(1, 65536);
        check(p, 65536, 16);
        sink += p[100];
        free(p);
    }
}

__attribute__((noinline)) void aligned_site(void) {
    for (int i = 0; i < 2048; i++) {
        void *p = NULL;
        if (posix_memalign(&p, 64, 16384) != 0) exit(3);
        check(p, 16384, 64);
        free(p);
        p = aligned_alloc(256, 16384);
        check(p, 16384, 256);
        free(p);
        p = memalign(128, 16384);
        check(p, 16384, 128);
        free(p);
    }
}

__attribute__((noinline)) void realloc_site(void) {
    for (int r = 0; r < REALLOC_ROUNDS; r++) {
        char *p = NULL;
        for (int s = 1; s <= REALLOC_STEPS; s++) {
            p = realloc(p, (size_t)s * REALLOC_STEP);
            check(p, (size_t)s * REALLOC_STEP, 16);
        }
        free(p);
    }
}

__attribute__((noinline)) void valloc_site(void) {
    for (int i = 0; i < 1024; i++) {
        void *p = valloc(8192);
        check(p, 8192, 4096);
        free(p);
        p = pvalloc(8192);
        check(p, 8192, 4096);
        free(p);
    }
}

__attribute__((noinline)) void array_site(void) {
    for (int i = 0; i < 1024; i++) {
        void *p = reallocarray(NULL, 1024, 32);
        check(p, 32768, 16);
        free(p);
    }
}

__attribute__((noinline)) void burn(void) {
    struct timespec a, b;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &a);
    do {
        for (int i = 0; i < 100000; i++) sink += (unsigned long)i * i;
        clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &b);
    } while ((b.tv_sec - a.tv_sec) * 1000 + (b.tv_nsec - a.tv_nsec) / 1000000 < 300);
}

static void *before_main;

__attribute__((constructor)) static void allocate_before_main(void) {
    before_main = malloc(1 << 20);
    check(before_main, 1 << 20, 16);
}

__attribute__((noinline)) void churn(int n, size_t size) {
    for (int i = 0; i < n; i++) {
        void *p = malloc(size);
        check(p, size, 16);
        free(p);
    }
}

static void on_usr1(int sig) {
    (void)sig;
    churn(256, 4096);
}

static pthread_key_t key;

static void at_thread_exit(void *value) {
    free(value);
    churn(256, 4096);
}

static void *thread_main(void *arg) {
    (void)arg;
    pthread_setspecific(key, malloc(4096));
    churn(256, 4096);
    return NULL;
}

__attribute__((noinline)) void edge_cases(void) {
    signal(SIGUSR1, on_usr1);
    for (int i = 0; i < 16; i++) raise(SIGUSR1);
    pthread_key_create(&key, at_thread_exit);
    pthread_t threads[8];
    for (int i = 0; i < 8; i++) pthread_create(&threads[i], NULL, thread_main, NULL);
    for (int i = 0; i < 8; i++) pthread_join(threads[i], NULL);
    pid_t child = fork();
    if (child == 0) {
        churn(4096, 4096);
        _exit(0);
    }
    int status = 0;
    if (waitpid(child, &status, 0) != child || !WIFEXITED(status) || WEXITSTATUS(status) != 0) exit(4);
    free(before_main);
}

__attribute__((noinline)) void bench(long rounds) {
    static void *ring[4096];
    unsigned long x = 1;
    for (long r = 0; r < rounds; r++) {
        for (long i = 0; i < (1L << 20); i++) {
            x = x * 6364136223846793005UL + 1442695040888963407UL;
            size_t slot = (x >> 20) & 4095;
            free(ring[slot]);
            ring[slot] = malloc(16 + ((x >> 40) & 1023));
            ((volatile char *)ring[slot])[0] = 1;
        }
    }
    for (int i = 0; i < 4096; i++) free(ring[i]);
}

int main(int argc, char **argv) {
    if (argc > 2 && strcmp(argv[1], "bench") == 0) {
        bench(atol(argv[2]));
        return 0;
    }
    leak_site();
    churn_site();
    calloc_site();
    aligned_site();
    realloc_site();
    valloc_site();
    array_site();
    if (argc > 1 && strcmp(argv[1], "cpu") == 0) burn();
    if (argc > 1 && strcmp(argv[1], "edge") == 0) edge_cases();
    /* A failing reallocarray must be refused, not sampled. */
    volatile size_t huge = SIZE_MAX / 2;
    if (reallocarray(NULL, huge, 4) != NULL) return 3;
    return 0;
}
