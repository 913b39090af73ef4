// A multithreaded program that forks again and again without exec while its threads allocate:
// each child allocates, starts a thread and leaves through exit() (atexit handlers run).
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static volatile int stop;

static void *worker(void *arg) {
    unsigned long x = 0;
    while (!stop) {
        void *p = malloc(100 + (x % 5000));
        memset(p, 1, 100);
        x += (unsigned long)p;
        free(p);
        for (int i = 0; i < 1000; i++) x = x * 31 + i;
    }
    return (void *)x;
}

static void *child_thread(void *arg) { free(malloc(1000)); return NULL; }

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 100;
    pthread_t t[4];
    for (int i = 0; i < 4; i++) pthread_create(&t[i], NULL, worker, NULL);
    int bad = 0;
    for (int i = 0; i < n; i++) {
        pid_t pid = fork();
        if (pid == 0) {
            alarm(30);
            for (int j = 0; j < 1000; j++) free(malloc(j * 10 + 1));
            pthread_t ct;
            if (pthread_create(&ct, NULL, child_thread, NULL) == 0) pthread_join(ct, NULL);
            volatile unsigned long x = 0;
            for (int k = 0; k < 200000; k++) x = x * 31 + k;
            exit(i % 5);
        }
        int st;
        waitpid(pid, &st, 0);
        if (!WIFEXITED(st) || WEXITSTATUS(st) != i % 5) {
            bad++;
            fprintf(stderr, "child %d: status %#x (signal %d)\n", pid, st, WIFSIGNALED(st) ? WTERMSIG(st) : 0);
        }
    }
    stop = 1;
    for (int i = 0; i < 4; i++) pthread_join(t[i], NULL);
    printf("forks=%d bad=%d\n", n, bad);
    return bad != 0;
}
