// The program lowers its descriptor limit to 16 at the start of main and then lives within it:
// rounds of four threads, each opening, appending to and closing a file of its own (at most 7
// descriptors of the program's at any time). A library's own descriptors must not take the
// program's: whatever it cannot open under the limit is its loss, never the program's.
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

static volatile int failures;

static void *writer(void *arg) {
    long id = (long)arg;
    char path[32], line[64];
    snprintf(path, sizeof path, "out.%ld", id % 4);
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd < 0) { __atomic_add_fetch(&failures, 1, __ATOMIC_RELAXED); perror(path); return NULL; }
    volatile unsigned long x = 0;
    for (int i = 0; i < 200000; i++) x += i;
    int n = snprintf(line, sizeof line, "thread %ld\n", id);
    if (write(fd, line, n) != n) __atomic_add_fetch(&failures, 1, __ATOMIC_RELAXED);
    close(fd);
    free(malloc(1000 + id));
    return NULL;
}

int main(void) {
    struct rlimit rl = {16, 16};
    if (setrlimit(RLIMIT_NOFILE, &rl)) { perror("setrlimit"); return 2; }
    for (long round = 0; round < 50; round++) {
        pthread_t t[4];
        for (long i = 0; i < 4; i++) pthread_create(&t[i], NULL, writer, (void *)(round * 4 + i));
        for (int i = 0; i < 4; i++) pthread_join(t[i], NULL);
    }
    printf("200 threads wrote under a 16-descriptor limit; failures: %d\n", failures);
    return failures != 0;
}
