// Two million malloc/free pairs of 100..1099 bytes through volatile pointers (no call is
// optimised away): an allocation profiler sampling every few KiB sees thousands of them,
// whichever allocator serves them.
#include <stdio.h>
#include <stdlib.h>

static void *(*volatile alloc)(size_t) = malloc;
static void (*volatile release)(void *) = free;

int main(void) {
    unsigned long sum = 0;
    for (int i = 0; i < 2000000; i++) {
        char *p = alloc(100 + i % 1000);
        p[0] = (char)i;
        sum += (unsigned char)p[0];
        release(p);
    }
    printf("checksum %lu\n", sum);
    return 0;
}
