/* Threads the preload library does not see being made: one started by a constructor, before
 * main (and before the recording starts), and one made with a raw clone(2) in main. Both burn
 * argv[1] ms of their own CPU time in a known function (early_worker, clone_worker) while main
 * waits; the sampler's /proc/self/task scan must find and sample them. Built with -O2. */
#define _GNU_SOURCE
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static volatile double sink;
static double budget_ms = 600;
static pthread_t early;

static double thread_cpu_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

__attribute__((noinline)) double burn(long n) {
    double s = 0;
    for (long i = 0; i < n; i++) s = s * 0.999999 + (double)(i ^ (i >> 3));
    return s;
}

__attribute__((noinline)) void early_worker_loop(void) {
    /* Waits for main to set the budget, then burns it. */
    while (thread_cpu_ms() < budget_ms) sink += burn(200000);
}

static void *early_worker(void *arg) {
    (void)arg;
    early_worker_loop();
    return NULL;
}

__attribute__((constructor)) static void start_early(void) {
    const char *ms = getenv("EARLY_MS");
    if (ms) budget_ms = atof(ms);
    pthread_create(&early, NULL, early_worker, NULL);
}

static int clone_done;

__attribute__((noinline)) void clone_worker_loop(void) {
    while (thread_cpu_ms() < budget_ms) sink += burn(200000);
}

static int clone_worker(void *arg) {
    (void)arg;
    clone_worker_loop();
    __atomic_store_n(&clone_done, 1, __ATOMIC_RELEASE);
    syscall(SYS_futex, &clone_done, FUTEX_WAKE, 1, NULL, NULL, 0);
    return 0;
}

int main(void) {
    size_t size = 1 << 20;
    char *stack = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
    if (stack == MAP_FAILED) return 3;
    int flags = CLONE_VM | CLONE_FS | CLONE_FILES | CLONE_SIGHAND | CLONE_THREAD | CLONE_SYSVSEM;
    if (clone(clone_worker, stack + size, flags, NULL) == -1) return 4;
    while (!__atomic_load_n(&clone_done, __ATOMIC_ACQUIRE))
        syscall(SYS_futex, &clone_done, FUTEX_WAIT, 0, NULL, NULL, 0);
    pthread_join(early, NULL);
    return 0;
}
