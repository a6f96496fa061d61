/*
 * stress_ask.c - cudafd_ask and a spin notifier left to its caller's asks
 * (ask.c), racing the poller, watches from other threads, cancels and a
 * close. Part of the stress test (stress.c).
 *
 * Covered: every watched wait reported exactly once, in watch order per
 * stream, whichever thread found it; a wait left to the caller that nobody
 * asks about is still found (the poller's backstop); a fault reported by an
 * ask; bad arguments; a close while another thread asks.
 */
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "stress.h"

enum { STREAMS = 8, PER = 60 };

struct asker {
    cudafd_notifier *n;
    volatile int stop;
    int calls, reported, errors;
    int closed; /* atomic: read by the closing thread */
    cudafd_completion *log; /* if set: every completion, in the order the asks returned them */
    int want;               /* ... until this many came */
};

static void *ask_loop(void *p)
{
    struct asker *a = p;
    cudafd_completion got[64];
    double deadline = now_s() + 20.0;
    while (!__atomic_load_n(&a->stop, __ATOMIC_ACQUIRE) && !(a->log && (a->reported >= a->want || now_s() > deadline))) {
        int rc = cudafd_ask(a->n, got, 64);
        a->calls++;
        if (rc >= 0) {
            if (a->log)
                memcpy(a->log + a->reported, got, (size_t)rc * sizeof *got);
            a->reported += rc;
        } else if (rc == CUDAFD_E_CLOSED)
            __atomic_add_fetch(&a->closed, 1, __ATOMIC_RELEASE);
        else
            a->errors++;
    }
    return NULL;
}

struct feeder {
    cudafd_notifier *n;
    CUstream stream;
    uint64_t tokens[PER];
    int ok;
};

static void *feed(void *p)
{
    struct feeder *f = p;
    for (int i = 0; i < PER; i++) {
        sim_launch(f->stream, (uint64_t)(50 + (i * 37) % 300) * 1000, 0); /* 50-350 us */
        if (cudafd_watch_stream(f->n, (uintptr_t)f->stream, &f->tokens[f->ok]) == CUDAFD_OK)
            f->ok++;
        if (i % 7 == 3)
            usleep(200);
    }
    return NULL;
}

/* Watches from STREAMS threads, one thread asking (and so draining) all the
 * while: each wait once, in order per stream, whoever found it. */
static void test_asked_waits(int mech, bool asking, CUcontext ctx)
{
    cudafd_notifier *n = NULL;
    CHECK(cudafd_notifier_create(mech, &n) == CUDAFD_OK, "create mech %d", mech);
    if (asking)
        CHECK(cudafd_notifier_set_asking(n, 1) == CUDAFD_OK, "set_asking");
    cudafd_completion *got = calloc(STREAMS * PER + 64, sizeof *got);
    struct asker a = {.n = n, .log = got, .want = STREAMS * PER};
    struct feeder f[STREAMS];
    pthread_t ta, tf[STREAMS];
    pthread_create(&ta, NULL, ask_loop, &a);
    for (int i = 0; i < STREAMS; i++) {
        f[i] = (struct feeder){.n = n, .stream = new_stream(ctx)};
        pthread_create(&tf[i], NULL, feed, &f[i]);
    }
    int total = 0;
    for (int i = 0; i < STREAMS; i++) {
        pthread_join(tf[i], NULL);
        total += f[i].ok;
    }
    CHECK(total == STREAMS * PER, "mech %d: %d of %d watches", mech, total, STREAMS * PER);
    pthread_join(ta, NULL); /* it stops once every wait came back, or after 20 s */
    int have = a.reported;
    int next[STREAMS] = {0}, bad = 0, foreign = 0;
    for (int k = 0; k < have; k++) {
        int s = -1;
        for (int i = 0; i < STREAMS && s < 0; i++)
            for (int j = next[i]; j < f[i].ok; j++)
                if (f[i].tokens[j] == got[k].token) {
                    s = i;
                    bad += j != next[i] || got[k].status != 0; /* out of order, or failed */
                    next[i] = j + 1;
                    break;
                }
        foreign += s < 0; /* reported twice, or not ours */
    }
    CHECK(have == total && bad == 0 && foreign == 0, "mech %d asking %d: %d of %d, %d out of order, %d unknown",
          mech, asking, have, total, bad, foreign);
    CHECK(a.errors == 0 && a.calls > 0, "mech %d: %d of %d asks failed", mech, a.errors, a.calls);
    CHECK(cudafd_notifier_pending(n) == 0, "pending %d", cudafd_notifier_pending(n));
    cudafd_notifier_destroy(n);
    for (int i = 0; i < STREAMS; i++)
        sim_stream_destroy(f[i].stream);
    free(got);
}

/* Left to a caller that never asks: the poller finds the wait anyway. */
static void test_backstop(CUcontext ctx)
{
    cudafd_notifier *n = NULL;
    cudafd_notifier_create(CUDAFD_MECH_SPIN, &n);
    cudafd_notifier_set_asking(n, 1);
    CUstream s = new_stream(ctx);
    sim_launch(s, 20 * 1000 * 1000, 0);
    uint64_t t;
    cudafd_completion c[1];
    CHECK(cudafd_watch_stream(n, (uintptr_t)s, &t) == CUDAFD_OK, "watch");
    CHECK(collect(n, c, 1, 10.0) == 1 && c[0].token == t && c[0].status == 0, "the unasked wait was not found");
    cudafd_notifier_destroy(n);
    sim_stream_destroy(s);
}

/* A fault is what the ask reports; an ask after close says closed. */
static void test_fault_and_close(void)
{
    CUcontext fctx = NULL;
    sim_ctx_create(0, &fctx);
    cudafd_notifier *n = NULL;
    cudafd_notifier_create(CUDAFD_MECH_SPIN, &n);
    cudafd_notifier_set_asking(n, 1);
    cudafd_notifier_set_max_lateness(n, 5LL * 1000 * 1000 * 1000); /* the poller asks late: the ask finds it */
    CUstream s = new_stream(fctx);
    sim_launch(s, 2 * 1000 * 1000, 700 /* CUDA_ERROR_ILLEGAL_ADDRESS */);
    uint64_t t;
    CHECK(cudafd_watch_stream(n, (uintptr_t)s, &t) == CUDAFD_OK, "watch before the fault");
    int reported = 0;
    cudafd_completion c[4];
    for (double end = now_s() + 10.0; !reported && now_s() < end; usleep(100))
        reported = cudafd_ask(n, c, 4);
    CHECK(reported == 1 && c[0].token == t && c[0].status == 700, "the fault was not reported by the ask (%d)",
          reported);
    CHECK(cudafd_ask(n, c, 4) == 0 && cudafd_drain(n, c, 4) == 0, "reported twice");
    cudafd_notifier_close(n);
    CHECK(cudafd_ask(n, c, 4) == CUDAFD_E_CLOSED, "ask after close");
    cudafd_notifier_destroy(n);
    sim_stream_destroy(s);
    sim_ctx_destroy(fctx);
}

static void test_bad_asks(void)
{
    cudafd_completion c[2];
    CHECK(cudafd_ask(NULL, c, 2) == CUDAFD_E_INVALID, "ask(NULL)");
    CHECK(cudafd_notifier_set_asking(NULL, 1) == CUDAFD_E_INVALID, "set_asking(NULL)");
    cudafd_notifier *n = NULL;
    cudafd_notifier_create(CUDAFD_MECH_HOSTFUNC, &n);
    CHECK(cudafd_ask(n, c, 2) == CUDAFD_E_INVALID, "ask on hostfunc");
    CHECK(cudafd_notifier_set_asking(n, 1) == CUDAFD_E_INVALID, "set_asking on hostfunc");
    cudafd_notifier_destroy(n);
    cudafd_notifier_create(CUDAFD_MECH_EVENT, &n);
    CHECK(cudafd_notifier_set_asking(n, 1) == CUDAFD_E_INVALID, "set_asking on event");
    CHECK(cudafd_ask(n, c, 2) == 0, "ask with nothing pending");
    CHECK(cudafd_ask(n, NULL, 2) == CUDAFD_E_INVALID && cudafd_ask(n, c, 0) == CUDAFD_E_INVALID, "bad out/max");
    /* a completion queued by the poller comes back through the ask, and the fd quiets */
    CUcontext ctx = NULL;
    sim_ctx_create(0, &ctx);
    CUstream s = new_stream(ctx);
    uint64_t t;
    cudafd_watch_stream(n, (uintptr_t)s, &t);
    for (double end = now_s() + 10.0; cudafd_notifier_pending(n) == 1 && now_s() < end;) {
        struct pollfd p = {.fd = cudafd_notifier_fd(n), .events = POLLIN};
        if (poll(&p, 1, 10) == 1)
            break; /* queued by the poller */
    }
    CHECK(cudafd_ask(n, c, 2) == 1 && c[0].token == t && c[0].status == 0, "the queued completion");
    struct pollfd p = {.fd = cudafd_notifier_fd(n), .events = POLLIN};
    CHECK(poll(&p, 1, 0) == 0, "the fd stayed readable after the ask drained the queue");
    sim_stream_destroy(s);
    sim_ctx_destroy(ctx);
    cudafd_notifier_destroy(n);
}

/* A close from another thread while one asks in a loop. */
static void test_close_while_asking(CUcontext ctx)
{
    CUstream s = new_stream(ctx);
    int closed = 0, errors = 0;
    for (int r = 0; r < 40; r++) {
        cudafd_notifier *n = NULL;
        cudafd_notifier_create(CUDAFD_MECH_SPIN, &n);
        cudafd_notifier_set_asking(n, 1);
        struct asker a = {.n = n};
        pthread_t ta;
        pthread_create(&ta, NULL, ask_loop, &a);
        for (int i = 0; i < 20; i++) {
            uint64_t t;
            sim_launch(s, 30 * 1000, 0);
            cudafd_watch_stream(n, (uintptr_t)s, &t);
        }
        usleep((useconds_t)(r * 50));
        cudafd_notifier_close(n);
        for (double end = now_s() + 10.0; !__atomic_load_n(&a.closed, __ATOMIC_ACQUIRE) && now_s() < end;)
            usleep(100); /* the asker's next call, however long the machine keeps it waiting */
        __atomic_store_n(&a.stop, 1, __ATOMIC_RELEASE);
        pthread_join(ta, NULL);
        closed += a.closed > 0;
        errors += a.errors;
        cudafd_notifier_destroy(n);
    }
    CHECK(errors == 0 && closed == 40, "asks racing a close: %d errors, %d of 40 saw it closed", errors, closed);
    sim_stream_destroy(s);
}

void test_ask(CUcontext ctx)
{
    test_bad_asks();
    test_asked_waits(CUDAFD_MECH_EVENT, false, ctx);
    test_asked_waits(CUDAFD_MECH_SPIN, false, ctx);
    test_asked_waits(CUDAFD_MECH_SPIN, true, ctx);
    test_backstop(ctx);
    test_fault_and_close();
    test_close_while_asking(ctx);
}
