// A program that brings its own allocator (as programs linking a private malloc do): it defines
// malloc, free, calloc, realloc and malloc_usable_size (a bump arena with a size header) and
// nothing else. glibc's reallocarray calls realloc through the PLT, so reallocarray reaches this
// realloc; aligned_alloc, not defined here, stays glibc's.
#define _GNU_SOURCE
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// 1 GiB of address space (pages are committed as used): a recorded run adds the recorder's own
// allocations, which this allocator never takes back.
static char arena[1 << 30] __attribute__((aligned(16)));
static size_t used;

void *malloc(size_t n) {
    n = (n + 15) & ~(size_t)15;
    size_t off = __atomic_fetch_add(&used, n + 16, __ATOMIC_RELAXED);
    if (off + n + 16 > sizeof arena) return NULL;
    char *p = arena + off + 16;
    ((size_t *)p)[-1] = n;
    return p;
}
void free(void *p) {}
void *calloc(size_t a, size_t b) {
    void *p = malloc(a * b);
    if (p) memset(p, 0, a * b);
    return p;
}
void *realloc(void *p, size_t n) {
    void *q = malloc(n);
    if (p && q) { size_t o = ((size_t *)p)[-1]; memcpy(q, p, o < n ? o : n); }
    return q;
}
size_t malloc_usable_size(void *p) { return p ? ((size_t *)p)[-1] : 0; }

static int ours(void *p) { return (char *)p >= arena && (char *)p < arena + sizeof arena; }

int main(void) {
    char *p = malloc(100);
    strcpy(p, "hello");
    for (int i = 0; i < 1000; i++) {
        p = reallocarray(p, 10 + i % 5, 100);
        if (!p || !ours(p) || strcmp(p, "hello")) { printf("reallocarray lost the block at %d\n", i); return 1; }
    }
    printf("reallocarray kept: %s, in the program's arena\n", p);
    void *a = aligned_alloc(64, 256);
    printf("aligned_alloc: %s\n", a && ((uintptr_t)a & 63) == 0 ? "aligned" : "failed");
    return 0;
}
