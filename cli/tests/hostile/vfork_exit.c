// vfork children that never exec: each runs a little on the parent's stack and memory and
// leaves with _exit, while the parent's threads burn CPU and allocate. The child borrows the
// parent's thread until _exit: whatever a library does in a signal handler or thread hook must
// be right in it too.
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

static volatile int stop;

static void *worker(void *arg) {
    unsigned long x = 0;
    while (!stop) { char *p = malloc(100 + x % 4000); p[0] = 1; x += (unsigned char)p[0]; free(p); }
    return NULL;
}

int main(void) {
    pthread_t t[2];
    for (int i = 0; i < 2; i++) pthread_create(&t[i], NULL, worker, NULL);
    int bad = 0;
    for (int i = 0; i < 2000; i++) {
        pid_t pid = vfork();
        if (pid == 0) {
            volatile unsigned long x = 0;
            for (int k = 0; k < 20000 * (i % 3); k++) x += k;
            _exit(i % 7);
        }
        int st;
        if (pid < 0 || waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != i % 7) {
            bad++;
            fprintf(stderr, "vfork child %d: status %#x\n", i, pid < 0 ? -1 : st);
        }
    }
    stop = 1;
    for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
    printf("vfork children=2000 bad=%d\n", bad);
    return bad != 0;
}
