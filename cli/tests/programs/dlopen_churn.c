// Loads and unloads the plugin named by argv[1] as fast as it can for argv[2] seconds, calling
// into it every 64 loads (a thread created through its GOT). While recorded, the recorder's
// rescan of new modules patches the plugin's GOT while other iterations unload it.
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

int main(int argc, char **argv) {
    if (argc < 3) return 2;
    double secs = atof(argv[2]);
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    long n = 0;
    do {
        void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
        if (!h) {
            fprintf(stderr, "%s\n", dlerror());
            return 2;
        }
        if (n % 64 == 0) {
            int (*spawn)(void) = (int (*)(void))dlsym(h, "plugin_spawn");
            if (!spawn || spawn() != 0) return 3;
        }
        dlclose(h);
        n++;
        clock_gettime(CLOCK_MONOTONIC, &b);
    } while ((b.tv_sec - a.tv_sec) + (b.tv_nsec - a.tv_nsec) / 1e9 < secs);
    printf("dlopen/dlclose cycles done: %s\n", n > 64 ? "many" : "few");
    return 0;
}
