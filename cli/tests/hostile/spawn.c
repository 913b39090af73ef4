// Starts /bin/true every way a program can (posix_spawn, vfork+execve, fork+execve, system)
// while two threads allocate; every child must exit 0.
#define _GNU_SOURCE
#include <pthread.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;
static volatile int stop;

static void *worker(void *arg) {
    unsigned long x = 0;
    while (!stop) { void *p = malloc(64); x += (unsigned long)p; free(p); }
    return (void *)x;
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 100;
    pthread_t t[2];
    for (int i = 0; i < 2; i++) pthread_create(&t[i], NULL, worker, NULL);
    int bad = 0;
    for (int i = 0; i < n; i++) {
        pid_t pid;
        int st;
        char *args[] = {"/bin/true", NULL};
        int mode = i % 4;
        if (mode == 0) {
            if (posix_spawn(&pid, "/bin/true", NULL, NULL, args, environ) != 0) { bad++; continue; }
        } else if (mode == 1) {
            pid = vfork();
            if (pid == 0) { execve("/bin/true", args, environ); _exit(127); }
        } else if (mode == 2) {
            pid = fork();
            if (pid == 0) { execve("/bin/true", args, environ); _exit(127); }
        } else {
            int r = system("true");
            if (r != 0) { bad++; fprintf(stderr, "system: %d\n", r); }
            continue;
        }
        waitpid(pid, &st, 0);
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) { bad++; fprintf(stderr, "mode %d: status %#x\n", mode, st); }
    }
    stop = 1;
    for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
    printf("n=%d bad=%d\n", n, bad);
    return bad != 0;
}
