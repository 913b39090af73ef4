/* Allocation at the rates allocation sampling is documented for, from deep stacks, for
 * `recorder record --alloc` tests of loss and of the estimate (built with -O2, no frame pointers
 * asked for). THREADS threads each recurse 1000 to 1500 frames deep, then malloc and free blocks
 * of 1 to 64 KiB, paced to about 1 GB/s per thread (a loaded machine runs them slower), and
 * return to recurse again to another depth, sleeping a millisecond between rounds; until each
 * has allocated its share of argv[1] MiB (default 4096). The program prints the bytes it asked
 * malloc for in all, as "allocated N bytes", on stdout.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define THREADS 4
/* Bytes allocated at the bottom of one descent. */
#define ROUND_BYTES (64u << 20)
/* Bytes per second a thread paces itself to. */
#define RATE 1000000000.0

static uint64_t share;
static uint64_t allocated[THREADS];
static volatile unsigned long sink;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static uint64_t next_random(uint64_t *x) {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    return *x;
}

/* The allocation loop at the bottom of a descent: one round's bytes, paced. */
__attribute__((noinline)) uint64_t storm_site(uint64_t *rng, double start, uint64_t done) {
    uint64_t bytes = 0;
    while (bytes < ROUND_BYTES) {
        size_t size = 1024 + next_random(rng) % (63 * 1024);
        char *p = malloc(size);
        if (p == NULL) {
            exit(3);
        }
        p[0] = 1;
        p[size - 1] = 2;
        sink += (unsigned long)p[0];
        free(p);
        bytes += size;
        /* Ahead of the pace: wait for it. */
        while ((done + bytes) / RATE > now() - start + 0.001) {
            struct timespec pause = {0, 200000};
            nanosleep(&pause, NULL);
        }
    }
    return bytes;
}

/* One frame of the descent; the addition after the call keeps it from becoming a loop. */
__attribute__((noinline)) uint64_t descend(int depth, uint64_t *rng, double start, uint64_t done) {
    if (depth == 0) {
        return storm_site(rng, start, done);
    }
    uint64_t bytes = descend(depth - 1, rng, start, done);
    sink += (unsigned long)depth;
    return bytes;
}

static void *thread_main(void *arg) {
    int id = (int)(intptr_t)arg;
    uint64_t rng = 0x9E3779B97F4A7C15ull * (uint64_t)(id + 1);
    double start = now();
    uint64_t done = 0;
    while (done < share) {
        int depth = 1000 + (int)(next_random(&rng) % 500);
        done += descend(depth, &rng, start, done);
        struct timespec pause = {0, 1000000};
        nanosleep(&pause, NULL);
    }
    allocated[id] = done;
    return NULL;
}

int main(int argc, char **argv) {
    uint64_t total_mib = argc > 1 ? strtoull(argv[1], NULL, 10) : 4096;
    share = (total_mib << 20) / THREADS;
    pthread_t threads[THREADS];
    for (int i = 0; i < THREADS; i++) {
        pthread_create(&threads[i], NULL, thread_main, (void *)(intptr_t)i);
    }
    uint64_t total = 0;
    for (int i = 0; i < THREADS; i++) {
        pthread_join(threads[i], NULL);
        total += allocated[i];
    }
    printf("allocated %llu bytes\n", (unsigned long long)total);
    return 0;
}
