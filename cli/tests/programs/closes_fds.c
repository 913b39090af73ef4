// A program that takes the descriptor table for itself early in main, as daemons do: MODE is
// closefrom (closefrom(3)), close_range (the system call), loop (close 3..1023 one by one) or
// dup2 (its files are dup2'ed over 3, 4, ... whatever those numbers held). It then writes
// eight files in rounds while threads burn CPU, allocate, start and exit, and prints what it
// wrote: every byte of every file is the program's, the same as without a recorder.
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#define FILES 8
#define ROUNDS 40

static volatile int stop;

static void *burner(void *arg) {
    volatile unsigned long x = 0;
    while (!stop) {
        x++;
        if ((x & 0xffff) == 0) free(malloc(4096 + (x & 0xfff)));
    }
    return arg;
}

static void *short_lived(void *arg) {
    volatile unsigned long x = 0;
    for (int i = 0; i < 2000000; i++) x += i;
    free(malloc(100000));
    return arg;
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "loop";
    if (strcmp(mode, "closefrom") == 0) {
        closefrom(3);
    } else if (strcmp(mode, "close_range") == 0) {
        syscall(SYS_close_range, 3u, ~0u, 0u);
    } else if (strcmp(mode, "loop") == 0) {
        for (int fd = 3; fd < 1024; fd++) close(fd);
    } else if (strcmp(mode, "dup2") != 0) {
        fprintf(stderr, "unknown mode %s\n", mode);
        return 2;
    }
    int fds[FILES];
    for (int i = 0; i < FILES; i++) {
        char path[64];
        snprintf(path, sizeof path, "data.%d", i);
        int fd = open(path, O_CREAT | O_RDWR | O_TRUNC, 0644);
        if (fd < 0) {
            perror(path);
            return 1;
        }
        if (strcmp(mode, "dup2") == 0) {
            // Over a low number, whatever it held.
            int low = 3 + i;
            if (fd != low) {
                dup2(fd, low);
                close(fd);
                fd = low;
            }
        }
        fds[i] = fd;
    }
    pthread_t burn;
    pthread_create(&burn, NULL, burner, NULL);
    for (int round = 0; round < ROUNDS; round++) {
        for (int i = 0; i < FILES; i++) {
            char line[64];
            int n = snprintf(line, sizeof line, "line %d of file %d\n", round, i);
            if (write(fds[i], line, n) != n) {
                perror("write");
                return 1;
            }
        }
        pthread_t t;
        pthread_create(&t, NULL, short_lived, NULL);
        pthread_join(t, NULL);
        usleep(20000);
    }
    stop = 1;
    pthread_join(burn, NULL);
    for (int i = 0; i < FILES; i++) close(fds[i]);
    printf("wrote %d files of %d lines\n", FILES, ROUNDS);
    return 0;
}
