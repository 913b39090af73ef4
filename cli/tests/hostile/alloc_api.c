// The whole C allocator API, on four threads: malloc, calloc (and its overflow), realloc (grow,
// realloc(NULL, n), realloc(p, 0)), reallocarray (and its overflow), posix_memalign (good and
// bad alignment), aligned_alloc, memalign, valloc, malloc_usable_size, free(NULL). Run on glibc
// and with another allocator preloaded.
#define _GNU_SOURCE
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int errors;
#define CHECK(c)                                                          \
    do {                                                                  \
        if (!(c)) {                                                       \
            __atomic_add_fetch(&errors, 1, __ATOMIC_RELAXED);             \
            fprintf(stderr, "check failed, line %d: %s\n", __LINE__, #c); \
        }                                                                 \
    } while (0)

static void *round_trip(void *arg) {
    for (int i = 0; i < 10000; i++) {
        size_t n = 1 + (i * 7919) % 5000;
        char *p = malloc(n);
        CHECK(p);
        memset(p, 1, n);
        CHECK(malloc_usable_size(p) >= n);
        p = realloc(p, n * 3);
        CHECK(p && p[0] == 1);
        p = reallocarray(p, 4, n);
        CHECK(p && p[n - 1] == 1);
        free(p);
        int *c = calloc(n, sizeof(int));
        CHECK(c && c[n - 1] == 0);
        free(c);
        errno = 0;
        CHECK(calloc(SIZE_MAX / 2, 4) == NULL && errno == ENOMEM);
        errno = 0;
        CHECK(reallocarray(NULL, SIZE_MAX / 2, 4) == NULL && errno == ENOMEM);
        void *a = NULL;
        CHECK(posix_memalign(&a, 64, n) == 0 && ((uintptr_t)a & 63) == 0);
        free(a);
        void *b = (void *)1;
        CHECK(posix_memalign(&b, 24, n) == EINVAL && b == (void *)1);
        a = aligned_alloc(256, 512);
        CHECK(a && ((uintptr_t)a & 255) == 0);
        free(a);
        a = memalign(4096, n);
        CHECK(a && ((uintptr_t)a & 4095) == 0);
        free(a);
        a = valloc(n);
        CHECK(a && ((uintptr_t)a & 4095) == 0);
        free(a);
        free(NULL);
        a = realloc(NULL, 10);
        CHECK(a);
        a = realloc(a, 0);
        free(a);
    }
    return NULL;
}

int main(void) {
    pthread_t t[4];
    for (int i = 0; i < 4; i++) pthread_create(&t[i], NULL, round_trip, NULL);
    for (int i = 0; i < 4; i++) pthread_join(t[i], NULL);
    printf("allocator API errors: %d\n", errors);
    return errors != 0;
}
