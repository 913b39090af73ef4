// The static program exec_static.c runs: no dynamic loader, so nothing can be preloaded into it;
// it unblocks every signal (as daemons and shells do at start) and burns CPU (a signal left
// pending or a timer left armed by the image before would find it with its default action),
// writes a file named after argv[1], and exits 3.
#include <signal.h>
#include <stdio.h>

int main(int argc, char **argv) {
    sigset_t all;
    sigfillset(&all);
    sigprocmask(SIG_UNBLOCK, &all, NULL);
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
