// After start, the program moves into new namespaces (unshare: mount, UTS, IPC) and chroots
// into a directory of its own, then keeps working there: threads burn CPU and allocate, a new
// thread starts, a child forks and exits, a file is written inside the jail. Paths a library
// opened by name before are gone; /proc is not there. Exit status 77: not permitted here
// (unprivileged), the reason on stderr.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static void *worker(void *arg) {
    unsigned long sum = (unsigned long)arg;
    for (int i = 0; i < 300000; i++) {
        char *p = malloc(48 + (i * 13) % 3000);
        p[0] = (char)i;
        sum = sum * 31 + (unsigned char)p[0];
        free(p);
    }
    return (void *)sum;
}

int main(void) {
    if (mkdir("jail", 0755) && errno != EEXIST) { perror("mkdir jail"); return 2; }
    if (unshare(CLONE_NEWNS | CLONE_NEWUTS | CLONE_NEWIPC)) {
        fprintf(stderr, "unshare: %s\n", strerror(errno));
        return errno == EPERM ? 77 : 2;
    }
    if (sethostname("jail", 4)) { perror("sethostname"); return 2; }
    if (chroot("jail") || chdir("/")) {
        fprintf(stderr, "chroot: %s\n", strerror(errno));
        return errno == EPERM ? 77 : 2;
    }
    pthread_t t[2];
    for (long i = 0; i < 2; i++) pthread_create(&t[i], NULL, worker, (void *)i);
    unsigned long sum = 0;
    for (int i = 0; i < 2; i++) { void *r; pthread_join(t[i], &r); sum ^= (unsigned long)r; }
    pid_t c = fork();
    if (c == 0) { free(malloc(100)); _exit(5); }
    int st;
    waitpid(c, &st, 0);
    FILE *f = fopen("/inside.txt", "w");
    if (!f) { perror("/inside.txt"); return 2; }
    fprintf(f, "checksum %lu\n", sum);
    fclose(f);
    char host[16] = {0};
    gethostname(host, sizeof host - 1);
    printf("in the jail: checksum %lu, child exited %d, hostname %s, /proc there: %s\n", sum,
           WIFEXITED(st) ? WEXITSTATUS(st) : -1, host, access("/proc/self", F_OK) == 0 ? "yes" : "no");
    return 0;
}
