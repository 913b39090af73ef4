// Blocks every signal, burns CPU (a profiler's SIGPROF goes pending meanwhile), then execs
// itself; the new image unblocks every signal at once, as many daemons, shells and runtimes do.
// A signal left pending across execve reaches the new image with its default action.
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv) {
    sigset_t all;
    sigfillset(&all);
    if (argc > 1 && !strcmp(argv[1], "child")) {
        sigprocmask(SIG_UNBLOCK, &all, NULL);
        printf("exec'd image unblocked every signal and survived\n");
        return 0;
    }
    sigprocmask(SIG_BLOCK, &all, NULL);
    volatile unsigned long x = 0;
    for (unsigned long i = 0; i < 300000000UL; i++) x += i;
    char *args[] = {argv[0], "child", NULL};
    execv(argv[0], args);
    perror("execv");
    return 1;
}
