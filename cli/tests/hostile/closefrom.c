// A daemon-style start: main gives up every descriptor it did not open itself (as sshd and many
// daemons do early in main), then writes its own data files while a thread burns CPU. Whatever a
// library opened before main, those numbers now belong to the program: nothing but the program
// may write to, read from or close them.
// argv[1]: how the descriptors go: "loop" (close 3..1023 one by one), "close_range"
// (close_range(3, ~0U, 0)), "dup2" (/dev/null dup2'ed over 3..1023, then each closed as the
// program opens its own).
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

enum { FILES = 8, ROUNDS = 30 };
static volatile int stop;

static void *burner(void *arg) {
    volatile unsigned long x = 0;
    while (!stop) x++;
    return NULL;
}

static int line(char *buf, size_t n, int round, int file) {
    return snprintf(buf, n, "line %d of file %d\n", round, file);
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "loop";
    if (!strcmp(mode, "close_range")) {
        if (syscall(SYS_close_range, 3U, ~0U, 0) != 0) { perror("close_range"); return 2; }
    } else if (!strcmp(mode, "dup2")) {
        int null = open("/dev/null", O_RDWR);
        for (int fd = 3; fd < 1024; fd++) if (fd != null) dup2(null, fd);
        close(null);
        for (int fd = 3; fd < 1024; fd++) close(fd);
    } else {
        for (int fd = 3; fd < 1024; fd++) close(fd);
    }
    int fds[FILES];
    for (int i = 0; i < FILES; i++) {
        char path[32];
        snprintf(path, sizeof path, "data.%d", i);
        fds[i] = open(path, O_CREAT | O_RDWR | O_TRUNC, 0644);
        if (fds[i] < 0) { perror(path); return 2; }
    }
    pthread_t t;
    pthread_create(&t, NULL, burner, NULL);
    for (int round = 0; round < ROUNDS; round++) {
        for (int i = 0; i < FILES; i++) {
            char buf[64];
            int n = line(buf, sizeof buf, round, i);
            if (write(fds[i], buf, n) != n) { perror("write"); return 2; }
        }
        usleep(20000);
    }
    stop = 1;
    pthread_join(t, NULL);
    int damaged = 0;
    for (int i = 0; i < FILES; i++) {
        char expect[ROUNDS * 64], got[ROUNDS * 64 + 1];
        size_t n = 0;
        for (int r = 0; r < ROUNDS; r++) n += line(expect + n, sizeof expect - n, r, i);
        ssize_t m = pread(fds[i], got, sizeof got, 0);
        if (m != (ssize_t)n || memcmp(got, expect, n) != 0) {
            damaged++;
            fprintf(stderr, "data.%d (fd %d): %zd bytes read back, %zu written\n", i, fds[i], m, n);
        }
        if (close(fds[i]) != 0) { damaged++; perror("close"); }
    }
    printf("%s: %d of %d data files damaged\n", mode, damaged, FILES);
    return damaged != 0;
}
