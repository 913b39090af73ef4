// A recorded program that runs a static binary (argv[1]): as a child (fork + execve) a few
// times while its threads burn CPU, then in its own place (execve from main, with its other
// threads still running). The static image must run to its end and exit 3 each time.
// argv[2] "blocked": main blocks every signal and burns CPU before that last execve, so a
// profiler's SIGPROF may be pending on it: the static image, which nothing can be preloaded
// into, unblocks it with its default action (terminate).
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

static void *burner(void *arg) {
    volatile unsigned long x = 0;
    for (;;) { char *p = malloc(300); x += (unsigned long)p; free(p); }
    return NULL;
}

int main(int argc, char **argv) {
    if (argc < 2) { fprintf(stderr, "usage: exec_static STATIC_BINARY\n"); return 2; }
    pthread_t t[2];
    for (int i = 0; i < 2; i++) pthread_create(&t[i], NULL, burner, NULL);
    int bad = 0;
    for (int i = 0; i < 4; i++) {
        char name[16];
        snprintf(name, sizeof name, "child%d", i);
        fflush(stdout);
        pid_t pid = fork();
        if (pid == 0) {
            char *args[] = {argv[1], name, NULL};
            execve(argv[1], args, environ);
            _exit(127);
        }
        int st;
        waitpid(pid, &st, 0);
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 3) {
            bad++;
            fprintf(stderr, "static child %d: status %#x (signal %d)\n", i, st, WIFSIGNALED(st) ? WTERMSIG(st) : 0);
        }
    }
    printf("static children: %d of 4 ended badly\n", bad);
    fflush(stdout);
    if (argc > 2 && !strcmp(argv[2], "blocked")) {
        sigset_t all;
        sigfillset(&all);
        sigprocmask(SIG_BLOCK, &all, NULL);
        volatile unsigned long x = 0;
        for (unsigned long i = 0; i < 300000000UL; i++) x += i;
    }
    char *args[] = {argv[1], "self", NULL};
    execve(argv[1], args, environ);
    perror("execve");
    return 1;
}
