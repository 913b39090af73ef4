// The plugin dlchurn.c loads and unloads: it imports pthread_create (built without RELRO, so its
// GOT stays writable) and starts one thread when asked.
#include <pthread.h>

static void *noop(void *arg) { return arg; }

int plug_spawn(void) {
    pthread_t t;
    if (pthread_create(&t, 0, noop, 0)) return -1;
    return pthread_join(t, 0);
}
