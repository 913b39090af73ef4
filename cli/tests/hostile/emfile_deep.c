// argv[1] "emfile": the process runs out of descriptors (EMFILE) while two threads burn CPU;
// then gives them back. "deep": the main thread recurses 4000 frames deep and burns there.
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

static volatile int stop;
static void *burner(void *arg) { volatile unsigned long x = 0; while (!stop) x++; return NULL; }

__attribute__((noinline)) static unsigned long deep(int n) {
    volatile char pad[64];
    pad[0] = n;
    if (n == 0) {
        volatile unsigned long x = 0;
        for (unsigned long i = 0; i < 300000000UL; i++) x += i;
        return x;
    }
    return deep(n - 1) + pad[0];
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "emfile";
    if (!strcmp(mode, "emfile")) {
        pthread_t t[2];
        for (int i = 0; i < 2; i++) pthread_create(&t[i], NULL, burner, NULL);
        struct rlimit rl = {256, 256};
        setrlimit(RLIMIT_NOFILE, &rl);
        int n = 0;
        while (open("/dev/null", O_RDONLY) >= 0) n++;
        fprintf(stderr, "holding every descriptor (%d opened), burning 1 s\n", n);
        sleep(1);
        stop = 1;
        for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
        printf("ran out of descriptors and went on\n");
    } else {
        printf("%lu\n", deep(4000));
    }
    return 0;
}
