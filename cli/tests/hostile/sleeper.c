// Sleeps (argv[1] seconds, default 1): a process with nothing to sample.
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

int main(int argc, char **argv) {
    sleep(argc > 1 ? atoi(argv[1]) : 1);
    printf("slept\n");
    return 0;
}
