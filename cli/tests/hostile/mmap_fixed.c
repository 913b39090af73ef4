// A program that manages its own address space: it reserves a range (PROT_NONE), maps pieces
// of it MAP_FIXED (anonymous and file-backed) over each other, changes protections, punches
// holes, and runs threads whose stacks it places in that range itself and replaces with
// MAP_FIXED mappings after they are joined; other threads allocate meanwhile. Nothing may keep
// or trust an address in that range it did not just check.
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

enum { RESERVE = 64 << 20, STACK = 256 << 10 };
static volatile int stop;

static void *allocator(void *arg) {
    unsigned long x = 0;
    while (!stop) { char *p = malloc(200 + x % 5000); p[0] = 1; x += (unsigned char)p[0]; free(p); }
    return NULL;
}

static void *on_own_stack(void *arg) {
    unsigned long sum = (unsigned long)arg;
    for (int i = 0; i < 20000; i++) {
        char *p = malloc(64 + i % 500);
        p[0] = (char)i;
        sum = sum * 31 + (unsigned char)p[0];
        free(p);
    }
    return (void *)sum;
}

int main(void) {
    pthread_t bg[2];
    for (int i = 0; i < 2; i++) pthread_create(&bg[i], NULL, allocator, NULL);
    char *base = mmap(NULL, RESERVE, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (base == MAP_FAILED) { perror("mmap"); return 2; }
    int fd = open("backing", O_RDWR | O_CREAT | O_TRUNC, 0644);
    if (fd < 0 || ftruncate(fd, 1 << 20)) { perror("backing"); return 2; }
    unsigned long sum = 0;
    for (int round = 0; round < 60; round++) {
        size_t slot = (size_t)(round % 16) * (RESERVE / 16);
        char *stack = base + slot;
        if (mmap(stack, STACK, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) != stack) {
            perror("mmap stack");
            return 2;
        }
        pthread_attr_t a;
        pthread_attr_init(&a);
        pthread_attr_setstack(&a, stack, STACK);
        pthread_t t;
        if (pthread_create(&t, &a, on_own_stack, (void *)(long)round)) { perror("pthread_create"); return 2; }
        pthread_attr_destroy(&a);
        void *r;
        pthread_join(t, &r);
        sum ^= (unsigned long)r;
        // The stack is replaced, at once, by a file mapping, then by nothing.
        char *file = mmap(stack, 1 << 20, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0);
        if (file != stack) { perror("mmap file"); return 2; }
        file[round * 4096] = (char)('a' + round % 26);
        mprotect(stack, 1 << 20, PROT_READ);
        mmap(stack, 1 << 20, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0);
        if (round % 10 == 9) munmap(base + slot + (2 << 20), 1 << 20);
    }
    stop = 1;
    for (int i = 0; i < 2; i++) pthread_join(bg[i], NULL);
    close(fd);
    printf("60 threads on stacks of the program's own mapping; checksum %lu\n", sum);
    return 0;
}
