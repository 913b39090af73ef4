// Fibers (makecontext/swapcontext) whose stacks are allocated, freed and reused while the
// program allocates inside them. Part 1: stacks of varying sizes from malloc, freed after each
// fiber ends, so later stacks reuse their memory. Part 2: a stack region whose upper half held
// a fiber that has ended and was returned to a pool as an inaccessible guard (PROT_NONE); the
// next fiber runs on the lower half, made by makecontext from a context captured inside the
// first one (the common pattern), so its outermost frame record points into the inaccessible
// half. A stack walk must stay on the stack the thread runs on now.
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <ucontext.h>

static ucontext_t main_ctx, fiber_ctx, next_ctx;
static volatile unsigned long sink;

__attribute__((noinline)) static void allocate_in_fiber(int n) {
    for (int i = 0; i < n; i++) {
        char *p = malloc(64 + i % 512);
        p[0] = (char)i;
        sink += (uintptr_t)p;
        free(p);
    }
}

static void churn_fiber(int n) {
    allocate_in_fiber(n);
    swapcontext(&fiber_ctx, &main_ctx);
}

static void first_fiber(void) {
    allocate_in_fiber(20000);
    // The next fiber's context is captured here, on this fiber's stack.
    getcontext(&next_ctx);
    swapcontext(&fiber_ctx, &main_ctx);
}

static void second_fiber(void) {
    allocate_in_fiber(20000);
    swapcontext(&next_ctx, &main_ctx);
}

int main(void) {
    // Part 1: malloc'd stacks, freed and reused.
    for (int round = 0; round < 200; round++) {
        size_t size = (size_t)(64 + (round * 37) % 256) * 1024;
        char *stack = malloc(size);
        getcontext(&fiber_ctx);
        fiber_ctx.uc_stack.ss_sp = stack;
        fiber_ctx.uc_stack.ss_size = size;
        fiber_ctx.uc_link = &main_ctx;
        makecontext(&fiber_ctx, (void (*)(void))churn_fiber, 1, 200);
        swapcontext(&main_ctx, &fiber_ctx);
        memset(stack, 0x5a, size);
        free(stack);
    }
    // Part 2: one mapping, two fibers; the first one's half becomes inaccessible.
    size_t half = 256 * 1024;
    char *region = mmap(NULL, 2 * half, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (region == MAP_FAILED) return 2;
    getcontext(&fiber_ctx);
    fiber_ctx.uc_stack.ss_sp = region + half;
    fiber_ctx.uc_stack.ss_size = half;
    fiber_ctx.uc_link = &main_ctx;
    makecontext(&fiber_ctx, first_fiber, 0);
    swapcontext(&main_ctx, &fiber_ctx);
    if (mprotect(region + half, half, PROT_NONE) != 0) return 3;
    next_ctx.uc_stack.ss_sp = region;
    next_ctx.uc_stack.ss_size = half;
    next_ctx.uc_link = &main_ctx;
    makecontext(&next_ctx, second_fiber, 0);
    swapcontext(&main_ctx, &next_ctx);
    printf("fibers done %d\n", (int)(sink & 1) * 0);
    return 0;
}
