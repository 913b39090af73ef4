// User-space fibers (makecontext/swapcontext) on two threads: each fiber allocates, frees and
// burns CPU on its own stack, switching back to its scheduler often; a finished fiber's stack is
// freed and the next fiber's stack is allocated in its place (malloc'd stacks reuse the same
// memory; mmap'd ones are unmapped, guard page included, and mapped anew). Code that caches a
// thread's stack bounds sees samples and allocations on stacks that are not the thread's, and
// on stacks that did not exist a moment ago.
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

enum { FIBERS = 8, GENERATIONS = 40, STACK = 128 << 10 };

struct fiber {
    ucontext_t ctx;
    void *stack;
    int mapped, done;
    unsigned long id, result;
};

struct scheduler {
    ucontext_t main;
    struct fiber fibers[FIBERS];
};

static __thread struct scheduler *current;

static void fiber_body(unsigned hi, unsigned lo) {
    struct fiber *f = (struct fiber *)(((uintptr_t)hi << 32) | lo);
    unsigned long sum = f->id;
    void *kept[16] = {0};
    for (int step = 0; step < 60; step++) {
        size_t n = 16 + (f->id * 7919 + step * 104729) % 20000;
        char *p = malloc(n);
        memset(p, (int)(step & 0xff), n);
        sum = sum * 31 + (unsigned char)p[n - 1] + n;
        free(kept[step % 16]);
        kept[step % 16] = p;
        volatile unsigned long x = 0;
        for (int k = 0; k < 20000; k++) x += k;
        char on_stack[512];
        memset(on_stack, (int)step, sizeof on_stack);
        sum += (unsigned char)on_stack[step];
        swapcontext(&f->ctx, &current->main);
    }
    for (int i = 0; i < 16; i++) free(kept[i]);
    f->result = sum;
    f->done = 1;
}

static void start_fiber(struct fiber *f, unsigned long id) {
    f->id = id;
    f->done = 0;
    f->mapped = id % 2;
    if (f->mapped) {
        char *m = mmap(NULL, STACK + 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (m == MAP_FAILED) { perror("mmap"); exit(2); }
        mprotect(m, 4096, PROT_NONE);
        f->stack = m;
    } else {
        f->stack = malloc(STACK + 4096);
    }
    getcontext(&f->ctx);
    f->ctx.uc_stack.ss_sp = (char *)f->stack + 4096;
    f->ctx.uc_stack.ss_size = STACK;
    f->ctx.uc_link = &current->main;
    uintptr_t p = (uintptr_t)f;
    makecontext(&f->ctx, (void (*)(void))fiber_body, 2, (unsigned)(p >> 32), (unsigned)p);
}

static void release_fiber(struct fiber *f) {
    if (f->mapped) munmap(f->stack, STACK + 4096);
    else free(f->stack);
}

static void *scheduler_thread(void *arg) {
    unsigned long base = (unsigned long)arg, total = 0;
    struct scheduler *s = calloc(1, sizeof *s);
    current = s;
    unsigned long next = base;
    for (int i = 0; i < FIBERS; i++) start_fiber(&s->fibers[i], next++);
    int alive = FIBERS;
    while (alive > 0) {
        for (int i = 0; i < FIBERS; i++) {
            struct fiber *f = &s->fibers[i];
            if (!f->stack) continue;
            swapcontext(&s->main, &f->ctx);
            if (!f->done) continue;
            total += f->result;
            release_fiber(f);
            f->stack = NULL;
            if (next < base + FIBERS * GENERATIONS) start_fiber(f, next++);
            else alive--;
        }
    }
    free(s);
    return (void *)total;
}

int main(void) {
    pthread_t t[2];
    for (long i = 0; i < 2; i++) pthread_create(&t[i], NULL, scheduler_thread, (void *)(i * 100000));
    unsigned long total = 0;
    for (int i = 0; i < 2; i++) { void *r; pthread_join(t[i], &r); total ^= (unsigned long)r; }
    printf("fibers=%d checksum=%lu\n", 2 * FIBERS * GENERATIONS, total);
    return 0;
}
