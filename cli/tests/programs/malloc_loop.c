// Two million malloc/free pairs of 100 to 1099 bytes (called through pointers, so the compiler
// keeps them): about 1.2 GB allocated.
#include <stdio.h>
#include <stdlib.h>

void *(*volatile allocate)(size_t) = malloc;
void (*volatile release)(void *) = free;

int main(void) {
    unsigned long s = 0;
    for (int i = 0; i < 2000000; i++) {
        char *p = allocate(100 + i % 1000);
        p[0] = 1;
        s += (unsigned long)p;
        release(p);
    }
    printf("done %lu\n", s & 1);
    return 0;
}
