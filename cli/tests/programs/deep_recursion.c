/* recorder record on a deep stack: the main thread recurses DEPTH frames (argv[1], frame pointers
 * kept) and burns ITERS iterations (argv[2], millions) of CPU at the bottom, then prints a sum
 * that depends on both, so a run that returns early or skips a frame shows in the output. */
#include <stdio.h>
#include <stdlib.h>

static unsigned long iters;

__attribute__((noinline)) static unsigned long deep_frame(int n) {
    volatile char pad[64];
    pad[0] = (char)n;
    if (n == 0) {
        volatile unsigned long x = 0;
        for (unsigned long i = 0; i < iters; i++) x += i;
        return x;
    }
    return deep_frame(n - 1) + (unsigned char)pad[0];
}

int main(int argc, char **argv) {
    int depth = argc > 1 ? atoi(argv[1]) : 4000;
    iters = (argc > 2 ? strtoul(argv[2], NULL, 10) : 300) * 1000000UL;
    printf("%lu\n", deep_frame(depth));
    return 0;
}
