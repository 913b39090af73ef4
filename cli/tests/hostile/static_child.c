// The static program exec_static.c runs: no dynamic loader, so nothing can be preloaded into it;
// it burns CPU (a signal or timer a parent image left behind would find it with its default
// action), writes a file named after argv[1], and exits 3.
#include <stdio.h>

int main(int argc, char **argv) {
    volatile unsigned long x = 0;
    for (unsigned long i = 0; i < 100000000UL; i++) x += i;
    char path[64];
    snprintf(path, sizeof path, "static.%s", argc > 1 ? argv[1] : "x");
    FILE *f = fopen(path, "w");
    if (!f) return 2;
    fprintf(f, "static child %s\n", argc > 1 ? argv[1] : "x");
    fclose(f);
    printf("static child %s done\n", argc > 1 ? argv[1] : "x");
    return 3;
}
