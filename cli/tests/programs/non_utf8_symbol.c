/* A hot function whose symbol name is not UTF-8 (bytes 0xff 0xfe, through an assembler label):
 * burns argv[1] million iterations of CPU in it. */
#include <stdlib.h>

volatile unsigned long sink;

__attribute__((noinline)) void hot(unsigned long n) __asm__("otlp_hot_\xff\xfe");

__attribute__((noinline)) void hot(unsigned long n) {
    unsigned long x = 1;
    for (unsigned long i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
    }
    sink = x;
}

int main(int argc, char **argv) {
    hot(argc > 1 ? strtoul(argv[1], 0, 10) * 1000000UL : 100000000UL);
    return 0;
}
