/* CPU time spent in a signal handler (the stack walk through the kernel's signal frame): main
 * calls interrupted_here, which raises SIGUSR1; the handler burns argv[1] ms of CPU (default 300)
 * in in_handler. Built with -O2 -fomit-frame-pointer, so no frame-pointer chain leads from the
 * handler to the code it interrupted: only a walk that reads the interrupted registers from the
 * signal frame (libc's __restore_rt) gets from in_handler to interrupted_here and main. */
#include <signal.h>
#include <stdlib.h>
#include <time.h>

static volatile double sink;
static long budget_ms = 300;

static double cpu_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

__attribute__((noinline)) static void in_handler(void) {
    double end = cpu_ms() + budget_ms;
    while (cpu_ms() < end)
        for (int i = 0; i < 1000; i++) sink = sink * 1.0000001 + 1;
}

static void on_usr1(int sig) {
    (void)sig;
    in_handler();
    sink += 1;
}

__attribute__((noinline)) static int interrupted_here(void) {
    raise(SIGUSR1);
    return (int)sink & 1;
}

int main(int argc, char **argv) {
    if (argc > 1) budget_ms = atol(argv[1]);
    struct sigaction sa = {0};
    sa.sa_handler = on_usr1;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGUSR1, &sa, 0);
    int r = interrupted_here();
    sink += r;
    return 0;
}
