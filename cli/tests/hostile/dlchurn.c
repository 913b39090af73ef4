// Loads and unloads a plugin (argv[1]) that imports pthread_create, as fast as it can for
// argv[2] seconds, calling into it now and then. A library that patches the plugin's GOT must do
// it while the plugin is still mapped: a store into a module dlclose'd meanwhile writes into
// whatever now occupies its pages.
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

int main(int argc, char **argv) {
    if (argc < 2) { fprintf(stderr, "usage: dlchurn PLUGIN [SECONDS]\n"); return 2; }
    double secs = argc > 2 ? atof(argv[2]) : 2;
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    long n = 0;
    int bad = 0;
    do {
        void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
        if (!h) { fprintf(stderr, "%s\n", dlerror()); return 2; }
        if (n % 64 == 0) {
            int (*spawn)(void) = (int (*)(void))dlsym(h, "plug_spawn");
            if (!spawn || spawn() != 0) bad++;
        }
        dlclose(h);
        n++;
        clock_gettime(CLOCK_MONOTONIC, &b);
    } while ((b.tv_sec - a.tv_sec) + (b.tv_nsec - a.tv_nsec) / 1e9 < secs);
    fprintf(stderr, "%ld dlopen/dlclose cycles\n", n);
    printf("plugin threads failed: %d\n", bad);
    return bad != 0;
}
