/* A prototype for the throughput figure (bench/board_probe.py): a thread
 * that asks the driver for the loop. The loop writes a stream's slot in
 * want[] (a plain store from Python) after each launch; this thread scans
 * the slots, calls cuStreamQuery for each one whose want differs from its
 * done, and stores the want it read into done[] when the stream is idle.
 * The loop learns completion by reading done[]: no driver call on its
 * thread. nap_ns: the pause between scans (0: spin).
 *   cc -O2 -shared -fPIC -o board_proto.so board_proto.c -ldl -pthread */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <time.h>

typedef int (*query_fn)(void *);

struct board {
    int n;
    long nap_ns;
    query_fn query;
    void **stream;
    _Atomic uint32_t *want, *done;
    atomic_int stop;
    atomic_ullong queries, scans;
    pthread_t th;
};

static void *scan(void *arg) {
    struct board *b = arg;
    prctl(PR_SET_TIMERSLACK, 1UL);
    pthread_setname_np(pthread_self(), "cudafd-board");
    struct timespec nap = {0, b->nap_ns};
    while (!atomic_load_explicit(&b->stop, memory_order_relaxed)) {
        for (int i = 0; i < b->n; i++) {
            uint32_t w = atomic_load_explicit(&b->want[i], memory_order_acquire);
            if (w == atomic_load_explicit(&b->done[i], memory_order_relaxed)) continue;
            atomic_fetch_add_explicit(&b->queries, 1, memory_order_relaxed);
            if (b->query(b->stream[i]) == 0) atomic_store_explicit(&b->done[i], w, memory_order_release);
        }
        atomic_fetch_add_explicit(&b->scans, 1, memory_order_relaxed);
        if (b->nap_ns) nanosleep(&nap, NULL);
    }
    return NULL;
}

/* driver: the path of the driver library the caller loaded (the GPU's or the simulator's). */
struct board *board_new(int n, long nap_ns, void **streams, const char *driver) {
    void *cuda = dlopen(driver, RTLD_NOW);
    if (!cuda) return NULL;
    struct board *b = calloc(1, sizeof *b);
    b->n = n;
    b->nap_ns = nap_ns;
    b->query = (query_fn)dlsym(cuda, "cuStreamQuery");
    b->stream = calloc((size_t)n, sizeof *b->stream);
    b->want = calloc((size_t)n, sizeof *b->want);
    b->done = calloc((size_t)n, sizeof *b->done);
    for (int i = 0; i < n; i++) b->stream[i] = streams[i];
    pthread_create(&b->th, NULL, scan, b);
    return b;
}

void *board_want(struct board *b) { return (void *)b->want; }
void *board_done(struct board *b) { return (void *)b->done; }
unsigned long long board_queries(struct board *b) { return atomic_load(&b->queries); }
unsigned long long board_scans(struct board *b) { return atomic_load(&b->scans); }

void board_free(struct board *b) {
    atomic_store(&b->stop, 1);
    pthread_join(b->th, NULL);
    free(b->stream);
    free((void *)b->want);
    free((void *)b->done);
    free(b);
}
