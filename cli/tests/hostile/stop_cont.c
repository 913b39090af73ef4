// The process is stopped and continued while its threads burn CPU and allocate: first by a
// child that sends its parent SIGSTOP and SIGCONT in turn, then by itself (raise(SIGSTOP)) with
// a helper child that waits to see it stopped and continues it.
#define _GNU_SOURCE
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
        char *p = malloc(64 + x % 2000);
        p[0] = 1;
        x += (unsigned char)p[0];
        free(p);
    }
    return NULL;
}

static char state_of(pid_t pid) {
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f) return '?';
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    char *paren = strrchr(buf, ')');
    return paren && paren[1] == ' ' ? paren[2] : '?';
}

int main(void) {
    pthread_t t[2];
    for (int i = 0; i < 2; i++) pthread_create(&t[i], NULL, worker, NULL);
    pid_t parent = getpid();
    pid_t child = fork();
    if (child == 0) {
        for (int i = 0; i < 20; i++) {
            kill(parent, SIGSTOP);
            while (state_of(parent) != 'T') usleep(1000);
            usleep(10000);
            kill(parent, SIGCONT);
            usleep(10000);
        }
        _exit(0);
    }
    int st;
    while (waitpid(child, &st, 0) < 0) {}
    int ok = WIFEXITED(st) && WEXITSTATUS(st) == 0;
    printf("stopped and continued by a child 20 times: %s\n", ok ? "ok" : "child failed");
    for (int i = 0; i < 10; i++) {
        pid_t helper = fork();
        if (helper == 0) {
            while (state_of(parent) != 'T') usleep(1000);
            kill(parent, SIGCONT);
            _exit(0);
        }
        raise(SIGSTOP);
        while (waitpid(helper, &st, 0) < 0) {}
        ok &= WIFEXITED(st) && WEXITSTATUS(st) == 0;
    }
    printf("stopped itself and was continued 10 times: %s\n", ok ? "ok" : "a helper failed");
    stop = 1;
    for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
    return !ok;
}
