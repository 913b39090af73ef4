// exit() while other threads allocate, start threads, fork and get sampled: whatever a library
// does in its exit handler runs under them. argv[1]: ms before exit; argv[2]: 1 = exit from a
// worker thread instead of main. Exit status 7 either way.
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static void *(*volatile alloc)(size_t) = malloc;
static void *tiny(void *arg) { free(alloc(64)); return NULL; }

static void *worker(void *arg) {
    long id = (long)arg;
    for (unsigned long i = 0;; i++) {
        char *p = alloc(16 + (i * 131) % 8000);
        p[0] = 1;
        free(p);
        if (id == 1 && i % 2000 == 0) { pthread_t t; if (!pthread_create(&t, NULL, tiny, NULL)) pthread_detach(t); }
        if (id == 2 && i % 50000 == 0) { pid_t c = fork(); if (c == 0) _exit(0); if (c > 0) waitpid(c, NULL, 0); }
    }
    return NULL;
}

static int ms;
static void *exiter(void *arg) { usleep(ms * 1000); exit(7); }

int main(int argc, char **argv) {
    ms = argc > 1 ? atoi(argv[1]) : 300;
    int from_thread = argc > 2 && atoi(argv[2]);
    pthread_t t;
    for (long i = 0; i < 4; i++) pthread_create(&t, NULL, worker, (void *)i);
    if (from_thread) { pthread_create(&t, NULL, exiter, NULL); for (;;) pause(); }
    usleep(ms * 1000);
    exit(7);
}
