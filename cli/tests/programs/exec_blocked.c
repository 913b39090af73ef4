/* A program that blocks every signal, burns CPU (so a SIGPROF of the recorder's sampler goes
 * pending on its blocked thread), then execs itself as "child", which unblocks every signal at
 * the start of main, as daemons, shells and runtimes do. The child prints what it found and
 * exits 0. Any exec function: argv[1] = "execv" (default), "execve", "execvp", "execl",
 * "execlp", "execle", "fexecve" or "execveat". argv[1] = "env": prints whether LD_PRELOAD and
 * RECORDER_CONTINUE are set (built static, a program the recorder cannot enter) and exits 3.
 * argv[1] = "fail": execv's a file that is executable but no program (ENOEXEC), prints the
 * errno, then burns 300 ms of CPU in after_failed_exec and exits 0.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

static double cpu_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

__attribute__((noinline)) static double after_failed_exec(void) {
    double until = cpu_ms() + 300, s = 0;
    while (cpu_ms() < until)
        for (int i = 0; i < 100000; i++) s = s * 0.999999 + i;
    return s;
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "fail") == 0) {
        const char *path = "./not-a-program";
        int fd = open(path, O_CREAT | O_WRONLY | O_TRUNC, 0755);
        if (fd < 0 || write(fd, "\1\2\3\4", 4) != 4) return 2;
        close(fd);
        char *args[] = {(char *)path, NULL};
        int rc = execv(path, args);
        printf("execv returned %d, errno %d\n", rc, errno);
        fflush(stdout);
        volatile double sink = after_failed_exec();
        (void)sink;
        return 0;
    }
    if (argc > 1 && strcmp(argv[1], "child") == 0) {
        sigset_t pending;
        sigpending(&pending);
        int was_pending = sigismember(&pending, SIGPROF);
        sigset_t all;
        sigfillset(&all);
        sigprocmask(SIG_UNBLOCK, &all, NULL);
        printf("child survived (SIGPROF pending at start: %d)\n", was_pending);
        return 0;
    }
    if (argc > 1 && strcmp(argv[1], "env") == 0) {
        printf("LD_PRELOAD set: %d, RECORDER_CONTINUE set: %d\n", getenv("LD_PRELOAD") != NULL,
               getenv("RECORDER_CONTINUE") != NULL);
        return 3;
    }
    const char *how = argc > 1 ? argv[1] : "execv";
    sigset_t all;
    sigfillset(&all);
    sigprocmask(SIG_BLOCK, &all, NULL);
    volatile unsigned long x = 0;
    /* 300 ms of this thread's CPU time: hundreds of sampler ticks at 1 ms, all left pending. */
    while (cpu_ms() < 300)
        for (int i = 0; i < 100000; i++) x += i;
    char *args[] = {argv[0], "child", NULL};
    if (strcmp(how, "execve") == 0) {
        execve(argv[0], args, environ);
    } else if (strcmp(how, "execvp") == 0) {
        execvp(argv[0], args);
    } else if (strcmp(how, "execl") == 0) {
        execl(argv[0], argv[0], "child", (char *)NULL);
    } else if (strcmp(how, "execlp") == 0) {
        execlp(argv[0], argv[0], "child", (char *)NULL);
    } else if (strcmp(how, "execle") == 0) {
        execle(argv[0], argv[0], "child", (char *)NULL, environ);
    } else if (strcmp(how, "fexecve") == 0) {
        int fd = open(argv[0], O_RDONLY | O_CLOEXEC);
        fexecve(fd, args, environ);
    } else if (strcmp(how, "execveat") == 0) {
        execveat(AT_FDCWD, argv[0], args, environ, 0);
    } else {
        execv(argv[0], args);
    }
    perror(how);
    return 1;
}
