// A plugin that imports pthread_create, built without RELRO (its GOT stays writable) by
// cli/tests/record_hosts.rs, loaded and unloaded by dlopen_churn.c.
#include <pthread.h>

static void *noop(void *a) { return a; }

int plugin_spawn(void) {
    pthread_t t;
    if (pthread_create(&t, 0, noop, 0)) return -1;
    return pthread_join(t, 0);
}
