// A program with an allocator of its own (as programs linking a private malloc do): it defines
// malloc, free, calloc, realloc and malloc_usable_size (a bump arena with a size header) and
// nothing else. glibc's reallocarray calls realloc through the PLT, so it reaches this realloc;
// aligned_alloc is glibc's (not defined here). Exit status 3: a block lost its contents. The
// arena is large: it never reuses memory, and the recorder's own allocations come from it too.
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char arena[1 << 28] __attribute__((aligned(16)));
static size_t used;

void *malloc(size_t n) {
    n = (n + 15) & ~(size_t)15;
    size_t off = __atomic_fetch_add(&used, n + 16, __ATOMIC_RELAXED);
    if (off + n + 16 > sizeof arena) return NULL;
    char *p = arena + off + 16;
    ((size_t *)p)[-1] = n;
    return p;
}
void free(void *p) { (void)p; }
void *calloc(size_t a, size_t b) {
    if (b && a > SIZE_MAX / b) return NULL;
    void *p = malloc(a * b);
    if (p) memset(p, 0, a * b);
    return p;
}
void *realloc(void *p, size_t n) {
    void *q = malloc(n);
    if (p && q) {
        size_t o = ((size_t *)p)[-1];
        memcpy(q, p, o < n ? o : n);
    }
    return q;
}
size_t malloc_usable_size(void *p) { return p ? ((size_t *)p)[-1] : 0; }

int main(void) {
    char *p = malloc(100);
    strcpy(p, "hello");
    for (int i = 1; i <= 1000; i++) {
        p = reallocarray(p, (size_t)i, 100);
        if (!p || strcmp(p, "hello") != 0) return 3;
    }
    printf("reallocarray kept: %s\n", p);
    void *a = aligned_alloc(64, 256);
    printf("aligned_alloc: %s\n", a && ((uintptr_t)a & 63) == 0 ? "aligned" : "wrong");
    return 0;
}
