/*
 * stress_ask.c - cudafd_ask_token and a spin notifier left to its callers'
 * asks (ask.c), racing the poller, other asking threads, cancels and a
 * close. Part of the stress test (stress.c).
 *
 * Covered: every watched wait reported exactly once, by its caller's ask or
 * through the queue (the poller found it first), never both; a wait left to
 * its caller that nobody asks about is still found (the poller's backstop);
 * a fault reported by an ask; bad arguments; a close while other threads
 * ask; a cancel or a close while an ask's query runs.
 */
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "stress.h"

enum { STREAMS = 8, PER = 60 };

/* One stream's waits, watched and then asked about in order, as a task that
 * spins would; each ends asked (reported to the ask) or queued (the ask said
 * it is not pending: the poller queued it first). */
struct asker {
    cudafd_notifier *n;
    CUstream stream;
    uint64_t tokens[PER];
    bool queued[PER];
    int ok, asked, errors;
};

static void *watch_then_ask(void *p)
{
    struct asker *a = p;
    for (int i = 0; i < PER; i++) {
        sim_launch(a->stream, (uint64_t)(50 + (i * 37) % 300) * 1000, 0); /* 50-350 us */
        if (cudafd_watch_stream(a->n, (uintptr_t)a->stream, &a->tokens[a->ok]) == CUDAFD_OK)
            a->ok++;
    }
    for (int i = 0; i < a->ok; i++) {
        double deadline = now_s() + 20.0;
        for (;;) {
            int64_t status = -1;
            int rc = cudafd_ask_token(a->n, a->tokens[i], &status);
            if (rc == 1) {
                a->asked++;
                a->errors += status != 0;
                break;
            }
            if (rc == CUDAFD_E_UNKNOWN_TOKEN) {
                a->queued[i] = true;
                break;
            }
            if (rc != 0 || now_s() > deadline) {
                a->errors++;
                break;
            }
        }
    }
    return NULL;
}

/* STREAMS threads watching and asking at once: each wait reported once, to its
 * ask or through the queue, whoever found it. */
static void test_asked_waits(int mech, bool asking, CUcontext ctx)
{
    cudafd_notifier *n = NULL;
    CHECK(cudafd_notifier_create(mech, &n) == CUDAFD_OK, "create mech %d", mech);
    if (asking)
        CHECK(cudafd_notifier_set_asking(n, 1) == CUDAFD_OK, "set_asking");
    struct asker a[STREAMS];
    pthread_t t[STREAMS];
    for (int i = 0; i < STREAMS; i++) {
        memset(&a[i], 0, sizeof a[i]);
        a[i].n = n;
        a[i].stream = new_stream(ctx);
        pthread_create(&t[i], NULL, watch_then_ask, &a[i]);
    }
    int watched = 0, asked = 0, queued = 0, errors = 0;
    for (int i = 0; i < STREAMS; i++) {
        pthread_join(t[i], NULL);
        watched += a[i].ok;
        asked += a[i].asked;
        errors += a[i].errors;
        for (int j = 0; j < a[i].ok; j++)
            queued += a[i].queued[j];
    }
    CHECK(watched == STREAMS * PER && errors == 0, "mech %d asking %d: %d of %d watches, %d errors", mech, asking,
          watched, STREAMS * PER, errors);
    cudafd_completion *got = calloc((size_t)queued + 1, sizeof *got);
    int have = collect(n, got, queued, 10.0);
    int foreign = 0;
    for (int k = 0; k < have; k++) {
        bool found = false;
        for (int i = 0; i < STREAMS && !found; i++)
            for (int j = 0; j < a[i].ok && !found; j++)
                if (a[i].tokens[j] == got[k].token && a[i].queued[j]) {
                    a[i].queued[j] = false; /* a second report would be foreign */
                    found = got[k].status == 0;
                }
        foreign += !found;
    }
    CHECK(asked + queued == watched && have == queued && foreign == 0,
          "mech %d asking %d: %d asked + %d queued of %d, %d drained, %d foreign or failed", mech, asking, asked,
          queued, watched, have, foreign);
    CHECK(cudafd_drain(n, got, 1) == 0, "a wait was reported to an ask and queued too");
    CHECK(cudafd_notifier_pending(n) == 0, "pending %d", cudafd_notifier_pending(n));
    cudafd_notifier_destroy(n);
    for (int i = 0; i < STREAMS; i++)
        sim_stream_destroy(a[i].stream);
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
    int64_t status;
    CHECK(cudafd_ask_token(n, t, &status) == CUDAFD_E_UNKNOWN_TOKEN, "an ask about a drained wait");
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
    int rc = 0;
    int64_t status = -1;
    for (double end = now_s() + 10.0; rc == 0 && now_s() < end; usleep(100))
        rc = cudafd_ask_token(n, t, &status);
    CHECK(rc == 1 && status == 700, "the fault was not reported by the ask (%d, %lld)", rc, (long long)status);
    cudafd_completion c[2];
    CHECK(cudafd_ask_token(n, t, &status) == CUDAFD_E_UNKNOWN_TOKEN && cudafd_drain(n, c, 2) == 0,
          "reported twice");
    cudafd_notifier_close(n);
    CHECK(cudafd_ask_token(n, t, &status) == CUDAFD_E_CLOSED, "ask after close");
    cudafd_notifier_destroy(n);
    sim_stream_destroy(s);
    sim_ctx_destroy(fctx);
}

static void test_bad_asks(void)
{
    int64_t status;
    CHECK(cudafd_ask_token(NULL, 1, &status) == CUDAFD_E_INVALID, "ask(NULL)");
    CHECK(cudafd_notifier_set_asking(NULL, 1) == CUDAFD_E_INVALID, "set_asking(NULL)");
    cudafd_notifier *n = NULL;
    cudafd_notifier_create(CUDAFD_MECH_HOSTFUNC, &n);
    CHECK(cudafd_ask_token(n, 1, &status) == CUDAFD_E_INVALID, "ask on hostfunc");
    CHECK(cudafd_notifier_set_asking(n, 1) == CUDAFD_E_INVALID, "set_asking on hostfunc");
    cudafd_notifier_destroy(n);
    cudafd_notifier_create(CUDAFD_MECH_EVENT, &n);
    CHECK(cudafd_notifier_set_asking(n, 1) == CUDAFD_E_INVALID, "set_asking on event");
    CHECK(cudafd_ask_token(n, 0, &status) == CUDAFD_E_UNKNOWN_TOKEN, "ask about token 0");
    CHECK(cudafd_ask_token(n, 12345ull << 32, &status) == CUDAFD_E_UNKNOWN_TOKEN, "ask about a token never made");
    CUcontext ctx = NULL;
    sim_ctx_create(0, &ctx);
    CUstream s = new_stream(ctx);
    uint64_t t;
    sim_launch(s, 50 * 1000 * 1000, 0);
    cudafd_watch_stream(n, (uintptr_t)s, &t);
    CHECK(cudafd_ask_token(n, t, NULL) == CUDAFD_E_INVALID, "ask with no status");
    CHECK(cudafd_ask_token(n, t, &status) == 0, "a running wait is not over");
    cudafd_notifier *other = NULL;
    cudafd_notifier_create(CUDAFD_MECH_EVENT, &other);
    CHECK(cudafd_ask_token(other, t, &status) == CUDAFD_E_UNKNOWN_TOKEN, "another notifier's token");
    cudafd_notifier_destroy(other);
    CHECK(cudafd_cancel(n, t) == CUDAFD_OK, "cancel");
    CHECK(cudafd_ask_token(n, t, &status) == CUDAFD_E_UNKNOWN_TOKEN, "ask about a cancelled wait");
    sim_stream_destroy(s);
    sim_ctx_destroy(ctx);
    cudafd_notifier_destroy(n);
}

struct closer_race {
    cudafd_notifier *n;
    CUstream stream;
    int closed, errors;
};

static void *ask_until_closed(void *p)
{
    struct closer_race *c = p;
    uint64_t t[20] = {0};
    int k = 0;
    for (int i = 0; i < 20; i++) {
        sim_launch(c->stream, 30 * 1000, 0);
        if (cudafd_watch_stream(c->n, (uintptr_t)c->stream, &t[k]) == CUDAFD_OK)
            k++;
    }
    for (double end = now_s() + 10.0; now_s() < end;) {
        int64_t status;
        int rc = cudafd_ask_token(c->n, t[k ? k - 1 : 0], &status);
        if (rc == CUDAFD_E_CLOSED) {
            c->closed = 1;
            break;
        }
        if (rc < 0 && rc != CUDAFD_E_UNKNOWN_TOKEN) /* (its waits were over and taken) */
            c->errors++;
    }
    return NULL;
}

/* A close from another thread while one watches and asks in a loop. */
static void test_close_while_asking(CUcontext ctx)
{
    CUstream s = new_stream(ctx);
    int closed = 0, errors = 0;
    for (int r = 0; r < 40; r++) {
        cudafd_notifier *n = NULL;
        cudafd_notifier_create(CUDAFD_MECH_SPIN, &n);
        cudafd_notifier_set_asking(n, 1);
        struct closer_race c = {.n = n, .stream = s};
        pthread_t ta;
        pthread_create(&ta, NULL, ask_until_closed, &c);
        usleep((useconds_t)(r * 50));
        cudafd_notifier_close(n);
        pthread_join(ta, NULL);
        closed += c.closed;
        errors += c.errors;
        cudafd_notifier_destroy(n);
    }
    CHECK(errors == 0 && closed == 40, "asks racing a close: %d errors, %d of 40 saw it closed", errors, closed);
    sim_stream_destroy(s);
}

struct held_ask {
    cudafd_notifier *n;
    uint64_t token;
    int rc;
};

static void *ask_held_up(void *p)
{
    struct held_ask *a = p;
    int64_t status = -1;
    a->rc = cudafd_ask_token(a->n, a->token, &status);
    return NULL;
}

/* An ask whose query is held up 200 ms (the poller, at a 1 s budget, waits
 * 250 ms before its first) while its wait's 1 s of work runs, and meanwhile
 * the wait is cancelled, or its notifier closed: the ask says so
 * (CUDAFD_E_UNKNOWN_TOKEN, CUDAFD_E_CLOSED), not "not over yet". */
static void test_let_go_during_an_ask(CUcontext ctx, bool close)
{
    CUstream s = new_stream(ctx);
    struct held_ask a = {NULL, 0, 1};
    cudafd_notifier_create(CUDAFD_MECH_EVENT, &a.n);
    cudafd_notifier_set_max_lateness(a.n, 1000 * 1000 * 1000);
    sim_launch(s, 1000 * 1000 * 1000, 0);
    CHECK(cudafd_watch_stream(a.n, (uintptr_t)s, &a.token) == CUDAFD_OK, "watch");
    sim_delay_next_query(200 * 1000 * 1000);
    pthread_t th;
    pthread_create(&th, NULL, ask_held_up, &a);
    usleep(50 * 1000); /* the ask is in its query */
    if (close)
        cudafd_notifier_close(a.n);
    else
        cudafd_cancel(a.n, a.token);
    pthread_join(th, NULL);
    CHECK(a.rc == (close ? CUDAFD_E_CLOSED : CUDAFD_E_UNKNOWN_TOKEN), "%s during an ask: the ask returned %d",
          close ? "a close" : "a cancel", a.rc);
    cudafd_notifier_destroy(a.n);
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
    test_let_go_during_an_ask(ctx, false);
    test_let_go_during_an_ask(ctx, true);
}
