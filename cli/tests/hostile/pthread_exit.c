// One thread that ends with pthread_exit (a forced unwind through its start), one that is
// cancelled at a cancellation point.
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static void *exiter(void *arg) { pthread_exit((void *)42); }
static void *cancelled(void *arg) { for (;;) { pthread_testcancel(); usleep(1000); } }

int main(void) {
    pthread_t t;
    void *r;
    pthread_create(&t, NULL, exiter, NULL);
    pthread_join(t, &r);
    printf("pthread_exit: joined, value %ld\n", (long)r);
    pthread_create(&t, NULL, cancelled, NULL);
    usleep(10000);
    pthread_cancel(t);
    pthread_join(t, &r);
    printf("cancel: joined, %s\n", r == PTHREAD_CANCELED ? "PTHREAD_CANCELED" : "not cancelled");
    return 0;
}
