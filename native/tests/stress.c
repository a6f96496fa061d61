/*
 * stress.c - the native core through its C API, against the simulator.
 *
 * Built and run by `make -C native check` (also with SAN=address and
 * SAN=thread). $CUDAFD_DRIVER must name libcudafd_sim.so. Every check that
 * fails prints its line; the last line reads "stress: N passed, M failed".
 * `stress NAME` runs only the tests whose call names NAME, e.g.
 * `stress record_order`.
 *
 * Covered: ordering and exactly-once delivery across many streams and two
 * contexts for every mechanism; waits from several threads at once (of
 * one stream, or one event, each found in the order of its record); a
 * cancellation storm; a fault with many pending waiters; close with pending
 * waits; hostfunc waits past the host-notification budget (launched later
 * by the watchdog: the cancel, close and fault cases hold hundreds); the
 * last notifier closed while other threads watch on it; a fork() child
 * refused and exiting while the parent's wait goes on, one forked while
 * the driver loads, one forked by the driver's own first cuInit, and one
 * closing what it inherited (the parent's fd stays quiet); waits of two
 * notifiers on one stream, each found within its own max_lateness; more spin waits than the poller asks in one round beside
 * a wait of another notifier; side streams kept
 * past the last notifier and released on request, a side stream left
 * waiting for a caller's event by a wait let go of kept from later waits,
 * and a primary context's
 * reference given back when its pool's first stream could not be made; a hostfunc watch made
 * while the watchdog's launch of an earlier one blocks (still in order), and
 * a fault reported, or swept from another wait, while a watch's own launch
 * blocks (the watch stands);
 * the smallest and a large
 * max_lateness; bad input; every live count back to zero at the end. With
 * $CUDAFD_SYNCFD_FAKE set, the syncfd mechanism too (stress_syncfd.c).
 */
#include <dlfcn.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "stress.h"

/* simulator entry points beside sim_calls.h's, resolved from the same library the core loads */
void (*sim_fail_next_signal)(CUresult);
void (*sim_fail_next_fence)(int);
void (*sim_delay_next_host_launch)(uint64_t);
static CUresult (*sim_event_create)(CUevent *, unsigned);
static CUresult (*sim_event_record)(CUevent, CUstream);
static CUresult (*sim_event_destroy)(CUevent);
static CUresult (*sim_primary_retain)(CUcontext *, CUdevice);
static CUresult (*sim_primary_release)(CUdevice);
static CUresult (*sim_primary_state)(CUdevice, unsigned int *, int *);
void (*sim_delay_next_query)(uint64_t);
static CUresult (*sim_ctx_sync)(void);
static void (*sim_delay_after_next_record)(uint64_t);
static int (*sim_record_delay_armed)(void);

static void load_sim(void)
{
    sim_calls_load("stress");
    void *lib = dlopen(getenv("CUDAFD_DRIVER"), RTLD_NOW); /* (loaded already: the same handle) */
#define SYM(var, name) *(void **)&var = dlsym(lib, name)
    SYM(sim_primary_retain, "cuDevicePrimaryCtxRetain");
    SYM(sim_primary_release, "cuDevicePrimaryCtxRelease");
    SYM(sim_primary_state, "cuDevicePrimaryCtxGetState");
    SYM(sim_delay_next_query, "cudafdsim_delay_next_query");
    SYM(sim_fail_next_signal, "cudafdsim_fail_next_signal");
    SYM(sim_fail_next_fence, "cudafdsim_fail_next_fence");
    SYM(sim_delay_next_host_launch, "cudafdsim_delay_next_host_launch");
    SYM(sim_event_create, "cuEventCreate");
    SYM(sim_event_record, "cuEventRecord");
    SYM(sim_event_destroy, "cuEventDestroy");
    SYM(sim_ctx_sync, "cuCtxSynchronize");
    SYM(sim_delay_after_next_record, "cudafdsim_delay_after_next_record");
    SYM(sim_record_delay_armed, "cudafdsim_record_delay_armed");
#undef SYM
}

CUstream new_stream(CUcontext ctx)
{
    CUstream s = NULL;
    CUcontext ignored;
    sim_push(ctx);
    sim_stream_create(&s, CU_STREAM_NON_BLOCKING);
    sim_pop(&ignored);
    return s;
}

static uint32_t rng = 12345;
static uint32_t next_rand(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 17;
    rng ^= rng << 5;
    return rng;
}

#define NSTREAMS 64
#define PER_STREAM 40

struct expect {
    uint64_t token;
    int stream;
    int seq;
};

static int find(struct expect *e, int n, uint64_t token)
{
    for (int i = 0; i < n; i++)
        if (e[i].token == token)
            return i;
    return -1;
}

void *watch_on_a_thread(void *p)
{
    struct watcher *w = p;
    w->rc = cudafd_watch_stream(w->n, (uintptr_t)w->s, &w->token);
    return NULL;
}

/* Until the record that sim_delay_after_next_record held up has been made
 * (it then sleeps before it returns): a thread that was slow to start, on a
 * loaded machine, still records before B's work is launched. */
static void record_taken(void)
{
    double end = now_s() + 30.0;
    while (sim_record_delay_armed() && now_s() < end)
        usleep(1000);
}

/* A's wait, whose point came before B's work, is the first to complete,
 * within a second (B's work takes 2 s). */
static void expect_first(cudafd_notifier *n, uint64_t a, int mech, const char *what)
{
    cudafd_completion c[2];
    double t0 = now_s();
    int got = collect(n, c, 1, 1.0);
    CHECK(got == 1 && c[0].token == a && c[0].status == 0,
          "mech %d: A's %s, over before B's work began, completed first (got %d, %s, in %.3f s)", mech, what, got,
          !got ? "none" : c[0].token == a ? "A" : "B", now_s() - t0);
}

/* Two threads watch one stream: A's watch is held up 100 ms right after its
 * record (a thread descheduled there), and meanwhile B launches 2 s of work
 * and watches. A's point came before B's work, so A's wait completes at
 * once, not behind B's: the lane keeps waits in the order of their records
 * (the poller asks only a lane's head). */
static void test_concurrent_watches_keep_record_order(int mech, CUcontext ctx)
{
    cudafd_notifier *n = NULL;
    CHECK(cudafd_notifier_create(mech, &n) == CUDAFD_OK, "create mech %d", mech);
    struct watcher a = {n, new_stream(ctx), 0, -1};
    cudafd_completion c[2];
    CHECK(cudafd_watch_stream(n, (uintptr_t)a.s, &a.token) == CUDAFD_OK && collect(n, c, 1, 5.0) == 1,
          "mech %d: a first wait (pools, threads made)", mech);
    sim_delay_after_next_record(100 * 1000 * 1000);
    pthread_t th;
    pthread_create(&th, NULL, watch_on_a_thread, &a);
    record_taken(); /* A recorded, and is held up before it returns */
    sim_launch(a.s, 2000ull * 1000 * 1000, 0);
    uint64_t b = 0;
    CHECK(cudafd_watch_stream(n, (uintptr_t)a.s, &b) == CUDAFD_OK, "mech %d: B's watch", mech);
    pthread_join(th, NULL);
    CHECK(a.rc == CUDAFD_OK, "mech %d: A's watch", mech);
    expect_first(n, a.token, mech, "wait");
    cudafd_notifier_destroy(n);
    sim_stream_destroy(a.s);
}

struct event_watcher {
    cudafd_notifier *n;
    CUcontext ctx;
    CUevent ev;
    uint64_t token;
    int rc;
};

static void *watch_event_on_a_thread(void *p)
{
    struct event_watcher *w = p;
    CUcontext ignored;
    sim_push(w->ctx);
    w->rc = cudafd_watch_event(w->n, (uintptr_t)w->ev, &w->token);
    sim_pop(&ignored);
    return NULL;
}

/* The same with one event: A watches it while its record is over and is
 * held up 100 ms right after its watch's own record; meanwhile the event is
 * recorded again behind 2 s of work and B watches it. A's wait completes at
 * once, not behind B's wait for that work (the side stream the two share
 * runs in order). */
static void test_concurrent_event_watches_keep_record_order(int mech, CUcontext ctx)
{
    cudafd_notifier *n = NULL;
    CHECK(cudafd_notifier_create(mech, &n) == CUDAFD_OK, "create mech %d", mech);
    CUstream s = new_stream(ctx);
    struct event_watcher a = {n, ctx, NULL, 0, -1};
    CUcontext ignored;
    sim_push(ctx);
    sim_event_create(&a.ev, 0);
    sim_event_record(a.ev, s);
    cudafd_completion c[2];
    CHECK(cudafd_watch_event(n, (uintptr_t)a.ev, &a.token) == CUDAFD_OK && collect(n, c, 1, 5.0) == 1,
          "mech %d: a first event wait (pools, threads made)", mech);
    sim_delay_after_next_record(100 * 1000 * 1000);
    pthread_t th;
    pthread_create(&th, NULL, watch_event_on_a_thread, &a);
    record_taken(); /* A recorded, and is held up before it returns */
    sim_launch(s, 2000ull * 1000 * 1000, 0);
    sim_event_record(a.ev, s);
    uint64_t b = 0;
    CHECK(cudafd_watch_event(n, (uintptr_t)a.ev, &b) == CUDAFD_OK, "mech %d: B's event watch", mech);
    pthread_join(th, NULL);
    CHECK(a.rc == CUDAFD_OK, "mech %d: A's event watch", mech);
    expect_first(n, a.token, mech, "event wait");
    cudafd_notifier_destroy(n);
    sim_event_destroy(a.ev);
    sim_pop(&ignored);
    sim_stream_destroy(s);
}

static void test_ordering(int mech, CUcontext ctx_a, CUcontext ctx_b)
{
    cudafd_notifier *n = NULL;
    CHECK(cudafd_notifier_create(mech, &n) == CUDAFD_OK, "create mech %d", mech);
    CUstream streams[NSTREAMS];
    for (int i = 0; i < NSTREAMS; i++)
        streams[i] = new_stream(i % 2 ? ctx_b : ctx_a);
    int total = NSTREAMS * PER_STREAM;
    struct expect *e = calloc((size_t)total, sizeof *e);
    int k = 0;
    for (int j = 0; j < PER_STREAM; j++)
        for (int i = 0; i < NSTREAMS; i++) {
            sim_launch(streams[i], (next_rand() % 400) * 1000ull, 0); /* 0-400 us */
            e[k].stream = i;
            e[k].seq = j;
            int rc = cudafd_watch_stream(n, (uintptr_t)streams[i], &e[k].token);
            if (rc != CUDAFD_OK)
                CHECK(rc == CUDAFD_OK, "watch %d", rc);
            k++;
        }
    cudafd_completion *got = calloc((size_t)total, sizeof *got);
    int have = collect(n, got, total, 20.0);
    CHECK(have == total, "mech %d: %d of %d completions", mech, have, total);
    int last_seq[NSTREAMS];
    memset(last_seq, -1, sizeof last_seq);
    int bad_order = 0, bad_status = 0, dup = 0;
    for (int i = 0; i < have; i++) {
        int idx = find(e, total, got[i].token);
        if (idx < 0) {
            dup++;
            continue;
        }
        if (got[i].status != 0)
            bad_status++;
        if (e[idx].seq <= last_seq[e[idx].stream])
            bad_order++;
        last_seq[e[idx].stream] = e[idx].seq;
        e[idx].token = 0; /* a second report would not be found */
    }
    CHECK(dup == 0 && bad_status == 0 && bad_order == 0, "mech %d: dup %d, status %d, order %d", mech, dup,
          bad_status, bad_order);
    CHECK(cudafd_notifier_pending(n) == 0, "pending %d", cudafd_notifier_pending(n));
    cudafd_notifier_destroy(n);
    for (int i = 0; i < NSTREAMS; i++)
        sim_stream_destroy(streams[i]);
    free(e);
    free(got);
}

struct thread_arg {
    cudafd_notifier *n;
    CUstream stream;
    int count;
    int ok;
    int early; /* stream_done said 1 right after a launch: the kernel was that quick */
    int prepared; /* cudafd_prepare calls that succeeded, racing the other threads' watches */
};

static void *watcher(void *p)
{
    struct thread_arg *a = p;
    for (int i = 0; i < a->count; i++) {
        uint64_t t;
        if (i % 50 == 0 && cudafd_prepare(a->n, (uintptr_t)a->stream) == CUDAFD_OK)
            a->prepared++;
        sim_launch(a->stream, 20000, 0);
        if (cudafd_stream_done((uintptr_t)a->stream)) /* the fast path, racing the watchers */
            a->early++;
        if (cudafd_watch_stream(a->n, (uintptr_t)a->stream, &t) == CUDAFD_OK)
            a->ok++;
    }
    return NULL;
}

static void test_threads(int mech, CUcontext ctx)
{
    cudafd_notifier *n = NULL;
    cudafd_notifier_create(mech, &n);
    pthread_t th[4];
    struct thread_arg args[4];
    for (int i = 0; i < 4; i++) {
        args[i] = (struct thread_arg){n, new_stream(ctx), 200, 0, 0, 0};
        pthread_create(&th[i], NULL, watcher, &args[i]);
    }
    int ok = 0, prepared = 0;
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        ok += args[i].ok;
        prepared += args[i].prepared;
    }
    CHECK(ok == 800, "mech %d: %d watches succeeded", mech, ok);
    CHECK(prepared == 16, "mech %d: %d of 16 cudafd_prepare calls succeeded", mech, prepared);
    cudafd_completion got[800];
    int have = collect(n, got, ok, 20.0);
    CHECK(have == ok, "mech %d: %d of %d from threads", mech, have, ok);
    for (int i = 0; i < 4; i++) /* every watch came back, so every stream is idle */
        CHECK(cudafd_stream_done((uintptr_t)args[i].stream) == 1 && args[i].early < args[i].count,
              "mech %d: stream_done after the last completion", mech);
    cudafd_notifier_destroy(n);
    for (int i = 0; i < 4; i++)
        sim_stream_destroy(args[i].stream);
}

static void test_cancel(int mech, CUcontext ctx)
{
    cudafd_notifier *n = NULL;
    cudafd_notifier_create(mech, &n);
    CUstream s = new_stream(ctx);
    enum { N = 400 };
    uint64_t tok[N];
    sim_launch(s, 300000000, 0); /* 300 ms ahead of them all: the cancels land while they are pending */
    for (int i = 0; i < N; i++) {
        sim_launch(s, 200000, 0); /* 200 us each */
        cudafd_watch_stream(n, (uintptr_t)s, &tok[i]);
    }
    int cancelled = 0;
    bool was_cancelled[N] = {false};
    for (int i = 0; i < N; i += 2)
        if (cudafd_cancel(n, tok[i]) == CUDAFD_OK) /* else it had completed already */
            was_cancelled[i] = true, cancelled++;
    /* How many took depends on how long this thread ran since the launch
     * (on a loaded machine, past the kernels): the checks below hold for any
     * count, this one only says something was tested. */
    CHECK(cancelled > 0, "no cancel took");
    CHECK(cudafd_cancel(n, tok[N - 2]) == CUDAFD_E_UNKNOWN_TOKEN, "double cancel");
    CHECK(cudafd_cancel(n, 0xdeadbeefull << 32) == CUDAFD_E_UNKNOWN_TOKEN, "made-up token");
    cudafd_completion got[N];
    int want = N - cancelled;
    int have = collect(n, got, want, 10.0);
    have += collect(n, got + have, N - have, 0.3); /* anything more would be a cancelled one */
    CHECK(have == want, "mech %d: %d reported, %d expected after %d cancels", mech, have, want, cancelled);
    int leaked = 0;
    for (int i = 0; i < have; i++)
        for (int j = 0; j < N; j++)
            if (got[i].token == tok[j] && was_cancelled[j])
                leaked++;
    CHECK(leaked == 0, "%d cancelled tokens reported", leaked);
    cudafd_notifier_destroy(n);
    sim_stream_destroy(s);
}

/* A fault on a notifier whose earlier waits all finished: the hostfunc
 * watchdog was idle and must be woken by the new wait. */
static void test_fault_after_idle(int mech)
{
    CUcontext ctx = NULL;
    sim_ctx_create(0, &ctx);
    cudafd_notifier *n = NULL;
    cudafd_notifier_create(mech, &n);
    CUstream s = new_stream(ctx);
    uint64_t t;
    cudafd_completion c[1];
    sim_launch(s, 1000, 0);
    cudafd_watch_stream(n, (uintptr_t)s, &t);
    CHECK(collect(n, c, 1, 5.0) == 1 && c[0].status == 0, "mech %d: first wait", mech);
    usleep(100000);
    sim_launch(s, 20000000, CUDA_ERROR_ILLEGAL_ADDRESS);
    if (cudafd_watch_stream(n, (uintptr_t)s, &t) == CUDAFD_OK) {
        CHECK(collect(n, c, 1, 20.0) == 1 && c[0].status == CUDA_ERROR_ILLEGAL_ADDRESS,
              "mech %d: fault after an idle spell", mech);
    } else { /* this thread was descheduled past the fault (a loaded machine): the watch says so */
        CHECK(cudafd_last_cuda_error() == CUDA_ERROR_ILLEGAL_ADDRESS, "mech %d: the watch reports the fault", mech);
    }
    cudafd_notifier_destroy(n);
    sim_stream_destroy(s);
    sim_ctx_destroy(ctx);
}

/* A watch that fails with a sticky error (its context faulted) hands it to
 * the context's other waits at once, in the failing call, whether it
 * watched a stream or an event: the pending wait's 1 s budget keeps the
 * poller from asking about it for 250 ms. */
static void test_failed_watch_tells_the_context(int mech, bool on_event)
{
    CUcontext ctx = NULL, ignored;
    sim_ctx_create(0, &ctx);
    cudafd_notifier *n = NULL, *other = NULL;
    cudafd_notifier_create(CUDAFD_MECH_EVENT, &n);
    cudafd_notifier_create(mech, &other);
    cudafd_notifier_set_max_lateness(n, 1000 * 1000 * 1000);
    CUstream s = new_stream(ctx), f = new_stream(ctx);
    sim_launch(s, 3000ull * 1000 * 1000, 0);
    uint64_t t = 0, t2 = 0;
    CHECK(cudafd_watch_stream(n, (uintptr_t)s, &t) == CUDAFD_OK, "watch the long work");
    sim_push(ctx);
    CUevent ev = NULL;
    sim_event_create(&ev, 0);
    sim_launch(f, 1000 * 1000, CUDA_ERROR_ILLEGAL_ADDRESS);
    sim_event_record(ev, f);
    usleep(20 * 1000); /* faulted */
    int rc = on_event ? cudafd_watch_event(other, (uintptr_t)ev, &t2) : cudafd_watch_stream(other, (uintptr_t)f, &t2);
    sim_pop(&ignored);
    CHECK(rc == CUDAFD_E_CUDA && cudafd_last_cuda_error() == CUDA_ERROR_ILLEGAL_ADDRESS,
          "mech %d, on an event %d: the watch in the faulted context fails (rc %d)", mech, on_event, rc);
    cudafd_completion c[1];
    CHECK(cudafd_drain(n, c, 1) == 1 && c[0].token == t && c[0].status == CUDA_ERROR_ILLEGAL_ADDRESS,
          "mech %d, on an event %d: the other wait has the fault when the failed watch returns", mech, on_event);
    cudafd_notifier_destroy(other);
    cudafd_notifier_destroy(n);
    cudafd_release_idle();
    sim_event_destroy(ev);
    sim_stream_destroy(s);
    sim_stream_destroy(f);
    sim_ctx_destroy(ctx);
}

/* A watch of an event of another context that faulted (faults here stay in
 * their context) fails with that context's error, and the current
 * context's own waits, whose work is healthy, complete without it. */
static void test_event_of_another_faulted_context(int mech)
{
    CUcontext mine = NULL, other = NULL, ignored;
    sim_ctx_create(0, &mine);
    sim_ctx_create(0, &other);
    CUstream s = new_stream(mine), f = new_stream(other);
    sim_push(other);
    CUevent ev = NULL;
    sim_event_create(&ev, 0);
    sim_pop(&ignored);
    sim_launch(f, 1000 * 1000, CUDA_ERROR_ILLEGAL_ADDRESS);
    sim_event_record(ev, f);
    usleep(20 * 1000); /* faulted */
    cudafd_notifier *n = NULL;
    cudafd_notifier_create(mech, &n);
    sim_launch(s, 100 * 1000 * 1000, 0);
    uint64_t t = 0, t2 = 0;
    CHECK(cudafd_watch_stream(n, (uintptr_t)s, &t) == CUDAFD_OK, "mech %d: watch the healthy work", mech);
    sim_push(mine);
    int rc = cudafd_watch_event(n, (uintptr_t)ev, &t2);
    sim_pop(&ignored);
    CHECK(rc == CUDAFD_E_CUDA && cudafd_last_cuda_error() == CUDA_ERROR_ILLEGAL_ADDRESS,
          "mech %d: the watch of the faulted context's event fails (rc %d)", mech, rc);
    cudafd_completion c[1];
    CHECK(collect(n, c, 1, 5.0) == 1 && c[0].token == t && c[0].status == 0,
          "mech %d: the healthy wait completes without the other context's fault (status %lld)", mech,
          (long long)c[0].status);
    cudafd_notifier_destroy(n);
    cudafd_release_idle();
    sim_event_destroy(ev);
    sim_stream_destroy(s);
    sim_stream_destroy(f);
    sim_ctx_destroy(mine);
    sim_ctx_destroy(other);
}

static void test_fault(int mech)
{
    CUcontext bad = NULL, good = NULL;
    sim_ctx_create(0, &bad);
    sim_ctx_create(1, &good);
    cudafd_notifier *n = NULL;
    cudafd_notifier_create(mech, &n);
    enum { S = 16, PER = 8 };
    CUstream sb[S], sg = new_stream(good);
    uint64_t tb[S * PER], tg;
    for (int i = 0; i < S; i++)
        sb[i] = new_stream(bad);
    for (int j = 0; j < PER; j++)
        for (int i = 0; i < S; i++) {
            sim_launch(sb[i], 60000000000ull, 0); /* 60 s: only the fault can end these early */
            cudafd_watch_stream(n, (uintptr_t)sb[i], &tb[j * S + i]);
        }
    sim_launch(sg, 1000000, 0);
    cudafd_watch_stream(n, (uintptr_t)sg, &tg);
    CUstream faulting = new_stream(bad);
    sim_launch(faulting, 1000000, CUDA_ERROR_ILLEGAL_ADDRESS);
    cudafd_completion got[S * PER + 1];
    int have = collect(n, got, S * PER + 1, 30.0);
    CHECK(have == S * PER + 1, "mech %d: %d of %d after fault", mech, have, S * PER + 1);
    int faults = 0, good_ok = 0;
    for (int i = 0; i < have; i++) {
        if (got[i].token == tg)
            good_ok = got[i].status == 0;
        else if (got[i].status == CUDA_ERROR_ILLEGAL_ADDRESS)
            faults++;
    }
    /* The faults came before the kernels could end (their status says so):
     * how soon is the benchmark's (bench/fault_probe.py), not a check that a
     * loaded machine could fail. */
    CHECK(faults == S * PER && good_ok, "mech %d: %d faults, other context ok %d", mech, faults, good_ok);
    uint64_t t;
    int rc = cudafd_watch_stream(n, (uintptr_t)sb[0], &t);
    CHECK(rc == CUDAFD_E_CUDA && cudafd_last_cuda_error() == CUDA_ERROR_ILLEGAL_ADDRESS,
          "watch on a faulted context: %d", rc);
    cudafd_notifier_destroy(n);
    for (int i = 0; i < S; i++)
        sim_stream_destroy(sb[i]);
    sim_stream_destroy(faulting);
    sim_stream_destroy(sg);
    sim_ctx_destroy(bad);
    sim_ctx_destroy(good);
}

static void test_close(int mech, CUcontext ctx)
{
    cudafd_notifier *n = NULL;
    cudafd_notifier_create(mech, &n);
    CUstream s = new_stream(ctx);
    uint64_t t;
    for (int i = 0; i < 50; i++) {
        sim_launch(s, 200000, 0);
        cudafd_watch_stream(n, (uintptr_t)s, &t);
    }
    CHECK(cudafd_notifier_pending(n) == 50, "pending before close");
    CHECK(cudafd_notifier_close(n) == CUDAFD_OK, "close");
    CHECK(cudafd_notifier_close(n) == CUDAFD_OK, "close twice");
    struct pollfd p = {.fd = cudafd_notifier_fd(n), .events = POLLIN};
    CHECK(poll(&p, 1, 0) == 1, "fd readable after close");
    cudafd_completion c;
    CHECK(cudafd_drain(n, &c, 1) == CUDAFD_E_CLOSED, "drain after close");
    CHECK(cudafd_watch_stream(n, (uintptr_t)s, &t) == CUDAFD_E_CLOSED, "watch after close");
    CHECK(cudafd_cancel(n, t) == CUDAFD_E_CLOSED, "cancel after close");
    CHECK(cudafd_notifier_set_max_lateness(n, CUDAFD_MAX_LATENESS_DEFAULT_NS) == CUDAFD_E_CLOSED,
          "max_lateness after close");
    CHECK(mech != CUDAFD_MECH_SPIN || cudafd_notifier_set_asking(n, 1) == CUDAFD_E_CLOSED, "asking after close");
    CHECK(cudafd_notifier_pending(n) == 0, "nothing pending after close");
    cudafd_notifier_destroy(n);
    sim_stream_destroy(s);
}

static void test_events(int mech, CUcontext ctx)
{
    cudafd_notifier *n = NULL;
    cudafd_notifier_create(mech, &n);
    CUstream s = new_stream(ctx);
    CUevent ev = NULL;
    CUcontext ignored;
    sim_push(ctx);
    sim_event_create(&ev, 0);
    sim_launch(s, 100000, 0);
    sim_event_record(ev, s);
    uint64_t t;
    CHECK(cudafd_watch_event(n, (uintptr_t)ev, &t) == CUDAFD_OK, "watch event");
    sim_event_destroy(ev); /* allowed once the watch returned */
    cudafd_completion c[1];
    CHECK(collect(n, c, 1, 5.0) == 1 && c[0].token == t && c[0].status == 0, "event completion");
    CHECK(cudafd_watch_event(n, (uintptr_t)ev, &t) == CUDAFD_E_CUDA, "destroyed event rejected");
    sim_pop(&ignored);
    CHECK(cudafd_watch_event(n, (uintptr_t)0x1234, &t) != CUDAFD_OK, "made-up event without context");
    cudafd_notifier_destroy(n);
    sim_stream_destroy(s);
}

static void test_bad_input(CUcontext ctx)
{
    cudafd_notifier *n = NULL;
    uint64_t t;
    CHECK(cudafd_notifier_create(7, &n) == CUDAFD_E_INVALID && n == NULL, "unknown mechanism");
    CHECK(cudafd_notifier_create(CUDAFD_MECH_EVENT, NULL) == CUDAFD_E_INVALID, "NULL out");
    CHECK(cudafd_watch_stream(NULL, 0, &t) == CUDAFD_E_INVALID, "NULL notifier");
    CHECK(cudafd_drain(NULL, NULL, 0) == CUDAFD_E_INVALID, "drain NULL");
    CHECK(cudafd_notifier_fd(NULL) == -1, "fd of NULL");
    cudafd_notifier_create(CUDAFD_MECH_EVENT, &n);
    CHECK(cudafd_watch_stream(n, 0xbad0, &t) == CUDAFD_E_CUDA &&
              cudafd_last_cuda_error() == CUDA_ERROR_INVALID_HANDLE,
          "made-up stream");
    CUstream s = new_stream(ctx);
    sim_stream_destroy(s);
    CHECK(cudafd_watch_stream(n, (uintptr_t)s, &t) == CUDAFD_E_CUDA, "destroyed stream");
    CHECK(cudafd_set_option(CUDAFD_OPT_MAX_LATENESS_NS, 0) == CUDAFD_E_INVALID, "bad option value");
    CHECK(cudafd_set_option(CUDAFD_OPT_MAX_LATENESS_NS, CUDAFD_MAX_LATENESS_MAX_NS + 1) == CUDAFD_E_INVALID,
          "option value too large");
    CHECK(cudafd_notifier_set_max_lateness(n, -5) == CUDAFD_E_INVALID, "bad max_lateness");
    CHECK(cudafd_notifier_set_max_lateness(NULL, 1000000) == CUDAFD_E_INVALID, "max_lateness of NULL");
    CHECK(cudafd_set_option(99, 1) == CUDAFD_E_INVALID, "bad option");
    /* tokens: made-up ones, and one whose wait ended, its slot reused since */
    const uint64_t made_up[] = {0, 1, UINT64_C(1) << 22, (UINT64_C(1) << 22) - 1, UINT64_MAX, UINT64_C(1) << 63};
    for (size_t i = 0; i < sizeof made_up / sizeof made_up[0]; i++)
        CHECK(cudafd_cancel(n, made_up[i]) == CUDAFD_E_UNKNOWN_TOKEN, "cancel of made-up token %#llx",
              (unsigned long long)made_up[i]);
    s = new_stream(ctx);
    uint64_t first, second;
    cudafd_completion c[1];
    CHECK(cudafd_watch_stream(n, (uintptr_t)s, &first) == CUDAFD_OK && collect(n, c, 1, 20.0) == 1,
          "a wait that ends");
    sim_launch(s, 50 * 1000 * 1000, 0);
    CHECK(cudafd_watch_stream(n, (uintptr_t)s, &second) == CUDAFD_OK && second != first, "the next wait's token");
    CHECK(cudafd_cancel(n, first) == CUDAFD_E_UNKNOWN_TOKEN, "cancel of a reported token");
    CHECK(collect(n, c, 1, 20.0) == 1 && c[0].token == second, "the next wait, after its slot's old token");
    sim_stream_destroy(s);
    /* the harness: a failure after a passed check never names an older error */
    CHECK(strcmp(check_error(true), cudafd_last_error()) != 0, "a stale error would be named");
    CHECK(cudafd_set_driver("/elsewhere/libcuda.so.1") == CUDAFD_E_STATE, "driver change after load");
    CHECK(strcmp(cudafd_cuda_error_name(700), "CUDA_ERROR_ILLEGAL_ADDRESS") == 0, "error name");
    cudafd_notifier_destroy(n);
}

/* The last notifier closed on one thread while others watch on it: every
 * watch succeeds or says closed, never a driver error from a side stream (or
 * event) retired under it. Then the notifier is destroyed, and the next
 * round starts with nothing open. */
struct race_arg {
    cudafd_notifier *n;
    CUcontext ctx;
    CUstream stream;
    CUevent event;
    int index;
    volatile int stop;
    int ok, closed, bad, last_bad;
    char why[256];
};

static void *race_watcher(void *p)
{
    struct race_arg *a = p;
    CUcontext ignored;
    sim_push(a->ctx); /* a bare event is waited for in the current context */
    for (int i = 0; !__atomic_load_n(&a->stop, __ATOMIC_ACQUIRE); i++) {
        uint64_t t;
        int rc = (i + a->index) % 2 ? cudafd_watch_event(a->n, (uintptr_t)a->event, &t)
                                    : cudafd_watch_stream(a->n, (uintptr_t)a->stream, &t);
        if (rc == CUDAFD_OK) {
            a->ok++;
        } else if (rc == CUDAFD_E_CLOSED) {
            a->closed++;
        } else {
            a->bad++;
            a->last_bad = rc;
            snprintf(a->why, sizeof a->why, "%s", cudafd_last_error());
        }
    }
    sim_pop(&ignored);
    return NULL;
}

static void test_close_races_watches(int mech, CUcontext ctx)
{
    enum { THREADS = 3, ROUNDS = 150 };
    struct race_arg args[THREADS];
    pthread_t th[THREADS];
    CUcontext ignored;
    for (int i = 0; i < THREADS; i++) {
        args[i] = (struct race_arg){.ctx = ctx, .stream = new_stream(ctx), .index = i};
        sim_push(ctx);
        sim_event_create(&args[i].event, 0);
        sim_event_record(args[i].event, args[i].stream);
        sim_pop(&ignored);
    }
    int ok = 0, closed = 0, bad = 0, last_bad = 0;
    char why[256] = "";
    for (int r = 0; r < ROUNDS; r++) {
        cudafd_notifier *n = NULL;
        if (cudafd_notifier_create(mech, &n) != CUDAFD_OK) {
            CHECK(false, "mech %d: create", mech);
            break;
        }
        for (int i = 0; i < THREADS; i++) {
            args[i].n = n;
            args[i].stop = 0;
            args[i].ok = args[i].closed = args[i].bad = 0;
            sim_launch(args[i].stream, (next_rand() % 2000) * 1000ull, 0); /* pending work now and then */
            pthread_create(&th[i], NULL, race_watcher, &args[i]);
        }
        usleep(next_rand() % 3000); /* close at a different point of the watches each round */
        cudafd_notifier_close(n);
        usleep(500);
        for (int i = 0; i < THREADS; i++) {
            __atomic_store_n(&args[i].stop, 1, __ATOMIC_RELEASE);
            pthread_join(th[i], NULL);
            ok += args[i].ok;
            closed += args[i].closed;
            if (args[i].bad) {
                bad += args[i].bad;
                last_bad = args[i].last_bad;
                snprintf(why, sizeof why, "%s", args[i].why);
            }
        }
        cudafd_notifier_destroy(n);
    }
    CHECK(bad == 0, "mech %d: %d watches racing the last close failed (rc %d: %s)", mech, bad, last_bad, why);
    CHECK(ok > 0 && closed > 0, "mech %d: %d watches, %d said closed: nothing raced", mech, ok, closed);
    for (int i = 0; i < THREADS; i++) {
        sim_push(ctx);
        sim_event_destroy(args[i].event);
        sim_pop(&ignored);
        sim_stream_destroy(args[i].stream);
    }
}

/* The exit status of a child process, or -1 (killed) if it did not end within timeout seconds. */
static int exit_status(pid_t pid, double timeout)
{
    int status = -1;
    double deadline = now_s() + timeout;
    pid_t done = 0;
    while ((done = waitpid(pid, &status, WNOHANG)) == 0 && now_s() < deadline)
        usleep(1000);
    if (done == 0) {
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
        return -1; /* hung */
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* fork() after use: the child is refused, clearly, and exits; the parent's
 * wait pending across the fork still completes (fork.c). */
static void test_fork_child(CUcontext ctx)
{
    cudafd_notifier *n = NULL;
    cudafd_notifier_create(CUDAFD_MECH_EVENT, &n);
    CUstream s = new_stream(ctx);
    uint64_t t;
    sim_launch(s, 100000000, 0); /* 100 ms: pending across the fork */
    CHECK(cudafd_watch_stream(n, (uintptr_t)s, &t) == CUDAFD_OK, "watch before the fork");
    pid_t pid = fork();
    if (pid == 0) {
        int bad = 0;
        cudafd_notifier *m = NULL;
        cudafd_completion c;
        bad += cudafd_notifier_create(CUDAFD_MECH_EVENT, &m) != CUDAFD_E_STATE || m != NULL;
        bad += strstr(cudafd_last_error(), "spawn") == NULL;
        bad += cudafd_watch_stream(n, (uintptr_t)s, &t) != CUDAFD_E_STATE;
        bad += cudafd_drain(n, &c, 1) != CUDAFD_E_STATE;
        bad += cudafd_stream_done((uintptr_t)s) != 0;
        bad += cudafd_cancel(n, t) != CUDAFD_E_STATE;
        bad += cudafd_notifier_set_max_lateness(n, CUDAFD_MAX_LATENESS_DEFAULT_NS) != CUDAFD_E_STATE;
        bad += cudafd_notifier_set_asking(n, 1) != CUDAFD_E_STATE;
        bad += cudafd_release_idle() != CUDAFD_E_STATE; /* the side streams are the parent's */
        bad += cudafd_notifier_close(n) != CUDAFD_OK;
        cudafd_notifier_destroy(n);
        _exit(bad ? 3 : 0);
    }
    int got = exit_status(pid, 20.0);
    CHECK(got == 0, "fork child: %s, status %d", got < 0 ? "hung" : "exited", got);
    cudafd_completion c[1];
    CHECK(collect(n, c, 1, 20.0) == 1 && c[0].token == t && c[0].status == 0, "the parent's wait after the fork");
    cudafd_notifier_destroy(n);
    sim_stream_destroy(s);
}

/* More spin waits than the poller asks about in one round (512): they are
 * due at every round, and must not keep an older wait of another notifier
 * from being asked. An event wait on a 200 ms kernel, watched first, is
 * reported while all the spin waits (10 s kernels) are still pending. */
#define NSPIN 600
static void test_many_spinning(void)
{
    CUcontext ctx = NULL;
    sim_ctx_create(0, &ctx);
    cudafd_notifier *e = NULL, *sp = NULL;
    cudafd_notifier_create(CUDAFD_MECH_EVENT, &e);
    cudafd_notifier_create(CUDAFD_MECH_SPIN, &sp);
    CUstream s0 = new_stream(ctx);
    static CUstream s[NSPIN];
    for (int i = 0; i < NSPIN; i++)
        s[i] = new_stream(ctx);
    uint64_t t0, t;
    sim_launch(s0, 200 * 1000 * 1000, 0); /* ends once the spin waits below are all watched */
    CHECK(cudafd_watch_stream(e, (uintptr_t)s0, &t0) == CUDAFD_OK, "watch the event wait");
    int watched = 0;
    for (int i = 0; i < NSPIN; i++) {
        sim_launch(s[i], 10ull * 1000 * 1000 * 1000, 0);
        watched += cudafd_watch_stream(sp, (uintptr_t)s[i], &t) == CUDAFD_OK;
    }
    CHECK(watched == NSPIN, "%d of %d spin waits watched", watched, NSPIN);
    cudafd_completion c[1];
    int got = collect(e, c, 1, 20.0);
    static cudafd_completion ended[NSPIN];
    int nended = cudafd_drain(sp, ended, NSPIN);
    CHECK(got == 1 && c[0].token == t0 && c[0].status == 0, "the event wait beside %d spin waits: %d reported",
          NSPIN, got);
    CHECK(nended == 0, "the event wait was reported after %d of the spin waits' 10 s kernels ended", nended);
    cudafd_notifier_destroy(sp); /* the last notifiers: the poller drops the detached waits */
    cudafd_notifier_destroy(e);
    int64_t st[CUDAFD_STAT_COUNT];
    double deadline = now_s() + 20.0;
    while (cudafd_stats(st, CUDAFD_STAT_COUNT), st[3] != 0 && now_s() < deadline)
        usleep(1000);
    CHECK(st[3] == 0, "%lld waits left after their notifiers closed", (long long)st[3]);
    sim_ctx_destroy(ctx); /* its streams and their kernels with it */
}

/* fork() while another thread loads the driver (the simulator's cuInit
 * made slow, as a real one is): the child is not left holding the load's
 * lock. Run in a process of its own that had not loaded the driver, so the
 * load starts there; the child gets CUDAFD_E_STATE (forked after the load,
 * which the fork waited for) or, had the fork come first, a working core. */
static void *load_driver(void *arg)
{
    __atomic_store_n((int *)arg, cudafd_driver_load(), __ATOMIC_RELEASE);
    return NULL;
}

static void test_fork_during_load(void)
{
    pid_t pid = fork();
    if (pid == 0) {
        setenv("CUDAFD_SIM_INIT_MS", "1000", 1);
        static int loaded = -100;
        pthread_t th;
        pthread_create(&th, NULL, load_driver, &loaded);
        pthread_detach(th); /* (a thread joined only in the parent would be a leak to the child's sanitizer) */
        usleep(100000); /* the load is in its cuInit now */
        pid_t child = fork();
        if (child == 0) {
            cudafd_notifier *m = NULL;
            int rc = cudafd_notifier_create(CUDAFD_MECH_EVENT, &m);
            if (rc == CUDAFD_OK)
                cudafd_notifier_destroy(m);
            _exit(rc == CUDAFD_E_STATE || rc == CUDAFD_OK ? 0 : 3);
        }
        int got = exit_status(child, 20.0);
        double deadline = now_s() + 20.0;
        while (__atomic_load_n(&loaded, __ATOMIC_ACQUIRE) == -100 && now_s() < deadline)
            usleep(1000);
        _exit(got == 0 && __atomic_load_n(&loaded, __ATOMIC_ACQUIRE) == CUDAFD_OK ? 0 : got < 0 ? 4 : 5);
    }
    int got = exit_status(pid, 40.0);
    CHECK(got == 0, "fork during the driver's load: %s (%d)",
          got == 4 ? "the child hung" : got == 5 ? "the child was refused unclearly, or the load failed" : "failed", got);
}

/* On a driver without stream ids (CUDA 11, JetPack 5) the legacy default
 * streams of two contexts share one key, 0. The hostfunc watchdog's rounds
 * hold back a wait that is over while an earlier wait of its stream is
 * pending; that earlier wait must be of the same stream in the same context,
 * not the other context's legacy stream behind a long kernel. Here both are
 * put off (another stream holds the host functions' budget), so only those
 * rounds end them. A child pretends to be a CUDA 11.4 driver (the simulator
 * reads that once). */
static void test_legacy_streams_of_two_contexts(void)
{
    pid_t pid = fork();
    if (pid == 0) {
        setenv("CUDAFD_SIM_DRIVER_VERSION", "11040", 1);
        load_sim();
        CUcontext a = NULL, b = NULL, c = NULL, ignored = NULL;
        sim_ctx_create(0, &a);
        sim_ctx_create(0, &b);
        sim_ctx_create(0, &c);
        cudafd_notifier *n = NULL, *spent = NULL;
        int rc = cudafd_notifier_create(CUDAFD_MECH_HOSTFUNC, &n);
        rc |= cudafd_notifier_create(CUDAFD_MECH_HOSTFUNC, &spent);
        CUstream busy = new_stream(c);
        sim_launch(busy, 2000 * 1000 * 1000ull, 0);
        uint64_t t = 0, ta = 0, tb = 0;
        for (int i = 0; i < 20; i++) /* more than the budget (16) */
            rc |= cudafd_watch_stream(spent, (uintptr_t)busy, &t);
        sim_push(b);
        sim_launch(NULL, 2000 * 1000 * 1000ull, 0);
        rc |= cudafd_watch_stream(n, 0, &tb);
        sim_pop(&ignored);
        sim_push(a);
        sim_launch(NULL, 1000 * 1000, 0);
        rc |= cudafd_watch_stream(n, 0, &ta);
        sim_pop(&ignored);
        cudafd_completion got[1];
        int k = collect(n, got, 1, 1.5); /* well before b's kernel ends */
        _exit(rc != CUDAFD_OK ? 3 : k != 1 ? 4 : got[0].token != ta ? 5 : 0);
    }
    int got = exit_status(pid, 20.0);
    CHECK(got == 0, "a CUDA 11 driver's legacy streams of two contexts: %s (%d)",
          got == 4 ? "the wait in a was held behind b's" : got == 3 ? "a call failed" : "failed", got);
}

/* A child closes and destroys a notifier it inherited (as a Python child's
 * finaliser does): the parent's fd, the same kernel object, does not turn
 * readable with nothing queued. */
static void test_fork_child_closes(void)
{
    cudafd_notifier *n = NULL;
    cudafd_notifier_create(CUDAFD_MECH_EVENT, &n);
    pid_t pid = fork();
    if (pid == 0) {
        int bad = cudafd_notifier_close(n) != CUDAFD_OK;
        cudafd_notifier_destroy(n);
        _exit(bad ? 3 : 0);
    }
    int got = exit_status(pid, 20.0);
    struct pollfd p = {.fd = cudafd_notifier_fd(n), .events = POLLIN};
    CHECK(got == 0 && poll(&p, 1, 0) == 0, "the parent's fd after its child closed the notifier: child %d, %s", got,
          p.revents ? "readable with nothing queued" : "quiet");
    cudafd_notifier_destroy(n);
}

/* Two notifiers' waits on one stream: the later one, of a notifier with a
 * far smaller max_lateness, is found within its own, though the lane's first
 * wait allows 10 s. */
static void test_budgets_on_one_stream(CUcontext ctx)
{
    CUstream s = new_stream(ctx);
    cudafd_notifier *lazy = NULL, *eager = NULL;
    cudafd_notifier_create(CUDAFD_MECH_EVENT, &lazy);
    cudafd_notifier_create(CUDAFD_MECH_EVENT, &eager);
    cudafd_notifier_set_max_lateness(lazy, CUDAFD_MAX_LATENESS_MAX_NS);
    cudafd_notifier_set_max_lateness(eager, 1000 * 1000);
    sim_launch(s, 2 * 1000 * 1000, 0);
    uint64_t t1, t2;
    cudafd_watch_stream(lazy, (uintptr_t)s, &t1);
    cudafd_watch_stream(eager, (uintptr_t)s, &t2);
    double t0 = now_s();
    cudafd_completion c;
    int got = collect(eager, &c, 1, 20.0);
    double took = now_s() - t0;
    /* 1 s: far past 1 ms (a loaded machine), far short of the lane's first 2.5 s ask */
    CHECK(got == 1 && c.token == t2 && took < 1.0, "the eager notifier's wait: %d after %.3f s", got, took);
    cudafd_notifier_destroy(lazy);
    cudafd_notifier_destroy(eager);
    sim_stream_destroy(s);
}

/* A lane due within half of its interval is asked in a round that runs
 * anyway (waiters.c). With a 10 s budget each new lane is first asked 2.5 s
 * after its watch: b, watched 0.8 s after a, is asked in a's round, 0.9 s
 * before its own plan (a late sleep here has 0.45 s of room). */
static void test_nearby_lanes_share_a_round(CUcontext ctx)
{
    CUstream a = new_stream(ctx), b = new_stream(ctx);
    cudafd_notifier *n = NULL;
    cudafd_notifier_create(CUDAFD_MECH_EVENT, &n);
    cudafd_notifier_set_max_lateness(n, CUDAFD_MAX_LATENESS_MAX_NS);
    sim_launch(a, 30ull * 1000 * 1000 * 1000, 0);
    sim_launch(b, 30ull * 1000 * 1000 * 1000, 0);
    int64_t st[CUDAFD_STAT_COUNT];
    uint64_t ta, tb;
    cudafd_stats(st, CUDAFD_STAT_COUNT);
    int64_t q0 = st[10];
    double t0 = now_s();
    cudafd_watch_stream(n, (uintptr_t)a, &ta);
    usleep(800 * 1000);
    cudafd_watch_stream(n, (uintptr_t)b, &tb);
    double tb0 = now_s() - t0;
    while (st[10] == q0 && now_s() - t0 < 10.0) { /* a's first round */
        usleep(5000);
        cudafd_stats(st, CUDAFD_STAT_COUNT);
    }
    double round = now_s() - t0;
    usleep(100 * 1000);
    cudafd_stats(st, CUDAFD_STAT_COUNT);
    CHECK(st[10] - q0 == 2 && round < tb0 + 2.4, "%lld queries by %.2f s, b watched at %.2f s, a's round at %.2f s",
          (long long)(st[10] - q0), now_s() - t0, tb0, round);
    cudafd_notifier_destroy(n);
    sim_stream_destroy(a);
    sim_stream_destroy(b);
}

/* The driver's first cuInit fork()s a helper (CUDAFD_SIM_INIT_FORK): the
 * load, on the thread that forks, is not held up by the core's fork
 * handler. Run in a process of its own, before this one loads the driver. */
static void test_fork_inside_load(void)
{
    pid_t pid = fork();
    if (pid == 0) {
        setenv("CUDAFD_SIM_INIT_FORK", "1", 1);
        _exit(cudafd_driver_load() == CUDAFD_OK ? 0 : 3);
    }
    int got = exit_status(pid, 20.0);
    CHECK(got == 0, "a fork() inside the driver's first cuInit: %s (%d)", got < 0 ? "the load hung" : "failed", got);
}

/* One-shot hostfunc notifiers, one after another: the first makes the
 * context's side streams, which outlive it; the later ones make none
 * (contexts.c). A kept pool whose context was destroyed is dropped at its
 * next use; cudafd_release_idle destroys the rest. */
static void test_side_streams_kept(void)
{
    CUcontext ctx = NULL;
    sim_ctx_create(0, &ctx);
    CUstream s = new_stream(ctx);
    int64_t st[CUDAFD_STAT_COUNT];
    int64_t made = -1;
    bool steady = true;
    for (int i = 0; i < 8; i++) {
        cudafd_notifier *n = NULL;
        cudafd_notifier_create(CUDAFD_MECH_HOSTFUNC, &n);
        uint64_t t;
        cudafd_completion c[1];
        sim_launch(s, 1000, 0);
        CHECK(cudafd_watch_stream(n, (uintptr_t)s, &t) == CUDAFD_OK && collect(n, c, 1, 20.0) == 1,
              "one-shot hostfunc wait %d", i);
        cudafd_notifier_destroy(n);
        cudafd_stats(st, CUDAFD_STAT_COUNT);
        if (made < 0)
            made = st[6];
        steady &= st[6] == made;
    }
    CHECK(made >= 32 && steady, "side streams made by one-shot notifiers: %lld, then %lld", (long long)made,
          (long long)st[6]);
    CHECK(cudafd_notifier_pending(NULL) < 0, "pending of NULL"); /* (no notifier is open here) */
    sim_stream_destroy(s);
    sim_ctx_destroy(ctx); /* their context goes: the kept streams are dead handles now */
    sim_ctx_create(0, &ctx); /* a new context: its own streams */
    s = new_stream(ctx);
    cudafd_notifier *n = NULL;
    cudafd_notifier_create(CUDAFD_MECH_HOSTFUNC, &n);
    uint64_t t;
    cudafd_completion c[1];
    CHECK(cudafd_watch_stream(n, (uintptr_t)s, &t) == CUDAFD_OK && collect(n, c, 1, 20.0) == 1 && c[0].status == 0,
          "a wait in a new context beside a dead one's kept streams");
    /* With a notifier open, release_idle lets go of the streams of the
     * contexts no wait is in flight in (the dead one's), not of the others. */
    sim_launch(s, 500ull * 1000 * 1000, 0);
    CHECK(cudafd_watch_stream(n, (uintptr_t)s, &t) == CUDAFD_OK, "a wait in flight");
    int released = cudafd_release_idle();
    cudafd_stats(st, CUDAFD_STAT_COUNT);
    CHECK(released >= 32 && st[6] == 32, "release_idle with a wait in flight: %d released, %lld kept", released,
          (long long)st[6]);
    CHECK(collect(n, c, 1, 20.0) == 1 && c[0].status == 0, "the wait in flight completes");
    cudafd_notifier_destroy(n);
    CHECK(cudafd_release_idle() == 32, "release_idle destroyed no kept stream");
    cudafd_stats(st, CUDAFD_STAT_COUNT);
    CHECK(st[6] == 0, "%lld side streams after release_idle", (long long)st[6]);
    sim_stream_destroy(s);
    sim_ctx_destroy(ctx);
}

static int64_t stat_now(int i)
{
    int64_t st[CUDAFD_STAT_COUNT];
    cudafd_stats(st, CUDAFD_STAT_COUNT);
    return st[i];
}

/* A wait on a caller's event let go of before that event completed leaves
 * its side stream waiting for the event (cuStreamWaitEvent). A later wait on
 * an event that is complete already is not queued behind it: it takes
 * another side stream, or, once every slot of the context was left so, one
 * made in place of such a one. `how`: 0 cancelled (the poller reaps it), 1
 * its notifier, the only one open, closed (the poller drops every wait), 2
 * all 32 slots left so by cancels, 3 a hostfunc wait put off (the host
 * functions' budget spent by a busy stream) and cancelled. */
static void test_side_stream_left_waiting(int how)
{
    const int64_t ms = 1000 * 1000;
    CUcontext ctx = NULL, ignored;
    sim_ctx_create(0, &ctx);
    CUstream s = new_stream(ctx), busy = new_stream(ctx);
    CUevent e1 = NULL, e2 = NULL;
    sim_push(ctx);
    sim_event_create(&e1, 0);
    sim_event_create(&e2, 0); /* never recorded: complete */
    sim_launch(s, 3000 * ms, 0);
    sim_event_record(e1, s);
    int mech = how == 3 ? CUDAFD_MECH_HOSTFUNC : CUDAFD_MECH_EVENT;
    cudafd_notifier *n = NULL;
    cudafd_notifier_create(mech, &n);
    uint64_t t = 0;
    int nbusy = 0;
    if (how == 3) { /* until one is put off */
        sim_launch(busy, 300 * ms, 0);
        for (int64_t before = -1; nbusy < 64 && stat_now(7) > before; nbusy++) {
            before = stat_now(7);
            CHECK(cudafd_watch_stream(n, (uintptr_t)busy, &t) == CUDAFD_OK, "watch %d of the busy stream", nbusy);
        }
    }
    int64_t pending = stat_now(3);
    for (int i = 0; i < (how == 2 ? 32 : 1); i++) {
        CHECK(cudafd_watch_event(n, (uintptr_t)e1, &t) == CUDAFD_OK, "how %d: watch the event behind 3 s (%d)", how, i);
        if (how == 1) {
            cudafd_notifier_destroy(n);
            n = NULL;
        } else {
            CHECK(cudafd_cancel(n, t) == CUDAFD_OK, "how %d: cancel (%d)", how, i);
        }
        for (double end = now_s() + 5; stat_now(3) > pending && now_s() < end;)
            usleep(1000); /* its side stream let go of */
        CHECK(stat_now(3) == pending, "how %d: the wait let go of (%d)", how, i);
    }
    if (!n)
        cudafd_notifier_create(mech, &n);
    int64_t streams = stat_now(6);
    if (how == 2)
        CHECK(streams == 32, "how 2: %lld side streams, each left waiting", (long long)streams);
    double t0 = now_s();
    CHECK(cudafd_watch_event(n, (uintptr_t)e2, &t) == CUDAFD_OK, "how %d: watch the complete event", how);
    cudafd_completion c[65];
    int got = 0, seen = -1; /* (the busy stream's waits come too, after 300 ms) */
    while (seen < 0 && got <= nbusy && collect(n, &c[got], 1, 10.0) == 1)
        if (c[got++].token == t)
            seen = got - 1;
    double took = now_s() - t0;
    CHECK(seen >= 0 && c[seen].status == 0 && took < 1.0, "how %d: the complete event's wait came after %.3f s (%d)",
          how, took, seen);
    /* a new stream for it (0, 1); one made in place of one left waiting (2); one of the 32 made at first (3) */
    CHECK(stat_now(6) == streams + (how < 2), "how %d: %lld side streams, %lld before the watch", how,
          (long long)stat_now(6), (long long)streams);
    got -= seen >= 0;
    CHECK(got + collect(n, c, nbusy - got, 5.0) == nbusy, "how %d: the busy stream's %d waits", how, nbusy);
    cudafd_notifier_destroy(n);
    sim_pop(&ignored);
    cudafd_release_idle();
    CHECK(stat_now(6) == 0, "how %d: %lld side streams after cudafd_release_idle", how, (long long)stat_now(6));
    sim_event_destroy(e1);
    sim_event_destroy(e2);
    sim_stream_destroy(s); /* its work still running */
    sim_stream_destroy(busy);
    sim_ctx_destroy(ctx);
}

/* hostfunc: a watch made while the watchdog launches an earlier wait of the
 * same stream that was put off (the budget of host functions spent), and
 * the launch blocks, is launched behind it: the two complete in order. The
 * watchdog's period is 2 s here, so that the earlier wait is never due a
 * periodic look, which would complete it unlaunched once its work is over
 * and leave no launch to block. A round needs the budget spent while the
 * fill kernel runs; where a descheduled thread let the kernel end first,
 * the host functions came back at once and the round is made again. */
static void test_hostfunc_launch_order(CUcontext ctx)
{
    CHECK(cudafd_set_option(CUDAFD_OPT_WATCHDOG_NS, 2000000000LL) == CUDAFD_OK, "watchdog period");
    cudafd_notifier *n = NULL;
    cudafd_notifier_create(CUDAFD_MECH_HOSTFUNC, &n);
    CUstream fill = new_stream(ctx), s = new_stream(ctx);
    int64_t st[CUDAFD_STAT_COUNT] = {0};
    int fillers = 0, in_order = 0, have = 0;
    static cudafd_completion c[80];
    int rounds = 0, tries = 0;
    for (; rounds < 8 && tries < 32; tries++) {
        uint64_t t, w1, w2;
        sim_launch(fill, 100 * 1000 * 1000, 0);
        for (fillers = 0; fillers < 64 && cudafd_stats(st, CUDAFD_STAT_COUNT) && st[7] < 16;) /* the core's budget */
            fillers += cudafd_watch_stream(n, (uintptr_t)fill, &t) == CUDAFD_OK;
        if (st[7] < 16) { /* the fill kernel is over: no wait would be put off */
            CHECK(collect(n, c, fillers, 20.0) == fillers, "the fillers of a round made again");
            continue;
        }
        rounds++;
        sim_launch(s, 1000 * 1000, 0);
        CHECK(cudafd_watch_stream(n, (uintptr_t)s, &w1) == CUDAFD_OK, "a wait put off");
        sim_delay_next_host_launch(3 * 1000 * 1000); /* its launch, once a filler is done */
        have = collect(n, c, 1, 20.0);
        sim_launch(s, 1000, 0);
        CHECK(cudafd_watch_stream(n, (uintptr_t)s, &w2) == CUDAFD_OK, "a watch during that launch");
        have += collect(n, c + have, fillers + 1, 20.0);
        int i1 = -1, i2 = -1;
        for (int i = 0; i < have; i++) {
            i1 = c[i].token == w1 ? i : i1;
            i2 = c[i].token == w2 ? i : i2;
        }
        in_order += have == fillers + 2 && i1 >= 0 && i1 < i2;
    }
    CHECK(rounds == 8 && in_order == 8, "a stream's two waits reported, in order, in %d of %d rounds (%d tries)",
          in_order, rounds, tries);
    cudafd_notifier_destroy(n);
    sim_stream_destroy(fill);
    sim_stream_destroy(s);
    CHECK(cudafd_set_option(CUDAFD_OPT_WATCHDOG_NS, 10 * 1000 * 1000) == CUDAFD_OK, "watchdog period back");
}

/* hostfunc: the context faults while a watch's launch blocks, and the
 * watchdog reports the fault for that wait before the launch comes back
 * refused: the watch succeeded (its token names the one completion). */
static void test_hostfunc_fault_during_launch(void)
{
    CUcontext ctx = NULL;
    sim_ctx_create(0, &ctx);
    cudafd_notifier *n = NULL;
    cudafd_notifier_create(CUDAFD_MECH_HOSTFUNC, &n);
    CUstream s = new_stream(ctx);
    /* its side streams made first: on a loaded machine making them can outlast the kernel */
    CHECK(cudafd_prepare(n, (uintptr_t)s) == CUDAFD_OK, "prepare: %s", cudafd_last_error());
    sim_launch(s, 100 * 1000 * 1000, CUDA_ERROR_ILLEGAL_ADDRESS); /* faults after the watch's record */
    sim_delay_next_host_launch(300 * 1000 * 1000); /* past several watchdog periods, and the fault */
    uint64_t t = 0;
    int rc = cudafd_watch_stream(n, (uintptr_t)s, &t);
    cudafd_completion c[2];
    int have = collect(n, c, 2, 1.5);
    CHECK(rc == CUDAFD_OK && have == 1 && c[0].token == t && c[0].status == CUDA_ERROR_ILLEGAL_ADDRESS,
          "watch %d, %d completions, the fault reported for its token", rc, have);
    cudafd_notifier_destroy(n);
    sim_stream_destroy(s);
    sim_ctx_destroy(ctx);
}

/* hostfunc: another wait's fault is swept to a watch whose own launch
 * blocks, and the launch then comes back refused: the watch stands (its
 * completion, the fault, was delivered). The watchdog's period is long
 * here, so that only the sweep reports the watch's fault. */
static void test_hostfunc_swept_during_launch(void)
{
    CUcontext ctx = NULL;
    sim_ctx_create(0, &ctx);
    CHECK(cudafd_set_option(CUDAFD_OPT_WATCHDOG_NS, 2000000000LL) == CUDAFD_OK, "watchdog period");
    cudafd_notifier *n = NULL;
    cudafd_notifier_create(CUDAFD_MECH_HOSTFUNC, &n);
    CUstream s1 = new_stream(ctx), s2 = new_stream(ctx);
    CHECK(cudafd_prepare(n, (uintptr_t)s1) == CUDAFD_OK, "prepare: %s", cudafd_last_error());
    uint64_t ta = 0, tw = 0;
    sim_launch(s1, 100 * 1000 * 1000, CUDA_ERROR_ILLEGAL_ADDRESS); /* faults after both watches */
    int ra = cudafd_watch_stream(n, (uintptr_t)s1, &ta);
    sim_delay_next_host_launch(300 * 1000 * 1000); /* past the fault of s1's kernel */
    int rw = cudafd_watch_stream(n, (uintptr_t)s2, &tw);
    cudafd_completion c[3];
    int have = collect(n, c, 3, 1.5), for_w = 0;
    for (int i = 0; i < have; i++)
        for_w += c[i].token == tw && c[i].status == CUDA_ERROR_ILLEGAL_ADDRESS;
    CHECK(ra == CUDAFD_OK && rw == CUDAFD_OK && have == 2 && for_w == 1,
          "watches %d and %d, %d completions, %d the second watch's fault", ra, rw, have, for_w);
    cudafd_notifier_destroy(n);
    CHECK(cudafd_set_option(CUDAFD_OPT_WATCHDOG_NS, 10 * 1000 * 1000) == CUDAFD_OK, "watchdog period back");
    sim_stream_destroy(s1);
    sim_stream_destroy(s2);
    sim_ctx_destroy(ctx);
}

/* A side-stream pool in a primary context holds that context while it makes
 * its first stream; when the stream cannot be made (the context faulted),
 * the reference goes with the pool's record: the caller's own release then
 * destroys the context. */
static void test_primary_released_after_a_failed_first_stream(void)
{
    int64_t before[CUDAFDSIM_STAT_COUNT], after[CUDAFDSIM_STAT_COUNT];
    sim_stats(before, CUDAFDSIM_STAT_COUNT);
    CUcontext p = NULL, ignored;
    sim_primary_retain(&p, 0);
    sim_push(p);
    CUstream s = NULL;
    sim_stream_create(&s, CU_STREAM_NON_BLOCKING);
    CUevent e = NULL;
    sim_event_create(&e, 0);
    sim_launch(s, 1000 * 1000, CUDA_ERROR_ILLEGAL_ADDRESS);
    sim_event_record(e, s);
    usleep(100 * 1000); /* faulted */
    cudafd_notifier *n = NULL;
    cudafd_notifier_create(CUDAFD_MECH_EVENT, &n);
    uint64_t t;
    CHECK(cudafd_watch_event(n, (uintptr_t)e, &t) == CUDAFD_E_CUDA, "a watch in a faulted primary context");
    cudafd_notifier_destroy(n);
    cudafd_release_idle();
    sim_event_destroy(e);
    sim_stream_destroy(s);
    sim_pop(&ignored);
    sim_primary_release(0);
    sim_stats(after, CUDAFDSIM_STAT_COUNT);
    CHECK(after[0] == before[0], "simulated contexts %lld before, %lld after (a primary reference kept)",
          (long long)before[0], (long long)after[0]);
}

static bool primary_active(CUdevice dev)
{
    unsigned int flags = 0;
    int active = 0;
    sim_primary_state(dev, &flags, &active);
    return active != 0;
}

/* Waits on a new stream of ctx, the second taking the first's pooled event. */
static void waits_in(cudafd_notifier *n, CUcontext ctx, const char *where)
{
    CUcontext ignored;
    sim_push(ctx);
    CUstream s = NULL;
    sim_stream_create(&s, CU_STREAM_NON_BLOCKING);
    for (int i = 0; i < 2; i++) {
        sim_launch(s, 200 * 1000, 0);
        uint64_t t = 0;
        cudafd_completion c[1];
        CHECK(cudafd_watch_stream(n, (uintptr_t)s, &t) == CUDAFD_OK, "watch %s: %s", where, cudafd_last_error());
        CHECK(collect(n, c, 1, 5.0) == 1 && c[0].token == t && c[0].status == 0, "wait %s", where);
    }
    sim_stream_destroy(s);
    sim_pop(&ignored);
}

/* The caller's last reference to a primary context goes while a notifier
 * that watched there is open: the context stays until the notifier closes,
 * then goes; retained again it has the old handle, and the next notifier's
 * waits there never give the driver an event of the old context (a real
 * driver may crash on one). */
static void test_primary_released_under_a_notifier(int mech)
{
    int64_t before[CUDAFDSIM_STAT_COUNT], after[CUDAFDSIM_STAT_COUNT];
    sim_stats(before, CUDAFDSIM_STAT_COUNT);
    CUcontext p[2] = {NULL, NULL};
    for (int round = 0; round < 2; round++) {
        cudafd_notifier *n = NULL;
        cudafd_notifier_create(mech, &n);
        sim_primary_retain(&p[round], 1);
        waits_in(n, p[round], "in a primary context");
        sim_primary_release(1); /* the caller's only reference */
        CHECK(primary_active(1), "mech %d: the primary context was destroyed under an open notifier", mech);
        waits_in(n, p[round], "in a primary context its caller released");
        cudafd_notifier_destroy(n);
        cudafd_release_idle();
        CHECK(!primary_active(1), "mech %d: a reference kept after the notifier closed", mech);
    }
    sim_stats(after, CUDAFDSIM_STAT_COUNT);
    CHECK(p[0] == p[1], "the simulator gives a primary context retained again the old handle");
    CHECK(after[6] == before[6], "mech %d: %lld calls given an event of a destroyed context", mech,
          (long long)(after[6] - before[6]));
    CHECK(after[0] == before[0] && after[2] == before[2], "contexts %lld and events %lld left",
          (long long)(after[0] - before[0]), (long long)(after[2] - before[2]));
}

/* The poller is inside a query of a wait's event when the last notifier
 * closes: cudafd_release_idle returns only once it has left, so the caller
 * can then destroy the context without its event being asked about again. */
static void test_release_idle_waits_for_the_poller(void)
{
    int64_t before[CUDAFDSIM_STAT_COUNT], after[CUDAFDSIM_STAT_COUNT];
    sim_stats(before, CUDAFDSIM_STAT_COUNT);
    CUcontext ctx = NULL;
    sim_ctx_create(0, &ctx);
    cudafd_notifier *n = NULL;
    cudafd_notifier_create(CUDAFD_MECH_EVENT, &n);
    CUstream s = new_stream(ctx);
    sim_launch(s, 2000ull * 1000 * 1000, 0);
    uint64_t t = 0;
    CHECK(cudafd_watch_stream(n, (uintptr_t)s, &t) == CUDAFD_OK, "watch: %s", cudafd_last_error());
    sim_delay_next_query(300 * 1000 * 1000);
    usleep(50 * 1000); /* the poller is in that query now */
    cudafd_notifier_destroy(n);
    cudafd_release_idle();
    sim_ctx_destroy(ctx);
    usleep(400 * 1000); /* a query still under way would have looked by now */
    sim_stats(after, CUDAFDSIM_STAT_COUNT);
    CHECK(after[6] == before[6], "%lld calls given an event of a destroyed context after cudafd_release_idle",
          (long long)(after[6] - before[6]));
}

/* A cancelled wait, and the waits of a notifier closed while another stays
 * open, leave the poller's lanes at its next round (cudafd_release_idle waits
 * for it), not when their work ends: nothing asks about them after that, a
 * spin wait no longer keeps the poller spinning, and their context, with no
 * wait left in it, can be destroyed once cudafd_release_idle has let go of
 * its record. */
static void test_dropped_waits_leave(int mech)
{
    int64_t before[CUDAFDSIM_STAT_COUNT], after[CUDAFDSIM_STAT_COUNT], st[CUDAFD_STAT_COUNT];
    sim_stats(before, CUDAFDSIM_STAT_COUNT);
    CUcontext mine = NULL, other = NULL;
    sim_ctx_create(0, &mine);
    sim_ctx_create(0, &other);
    CUstream s = new_stream(mine), o = new_stream(other);
    cudafd_notifier *stays = NULL, *n = NULL;
    cudafd_notifier_create(CUDAFD_MECH_EVENT, &stays);
    cudafd_notifier_create(mech, &n);
    uint64_t t = 0, kept = 0;
    sim_launch(o, 1000ull * 1000 * 1000, 0);
    CHECK(cudafd_watch_stream(stays, (uintptr_t)o, &kept) == CUDAFD_OK, "a wait that stays");
    sim_launch(s, 3000ull * 1000 * 1000, 0);
    CHECK(cudafd_watch_stream(n, (uintptr_t)s, &t) == CUDAFD_OK, "mech %d: watch", mech);
    CHECK(cudafd_cancel(n, t) == CUDAFD_OK, "mech %d: cancel", mech);
    cudafd_release_idle();
    cudafd_stats(st, CUDAFD_STAT_COUNT);
    int64_t pending = st[3], queries = st[10];
    usleep(50 * 1000);
    cudafd_stats(st, CUDAFD_STAT_COUNT);
    /* the wait that stays is asked at most every 100 us (the default budget's floor) */
    CHECK(pending == 1 && st[10] - queries <= 600, "mech %d: after a cancel, %lld waits pending, %lld queries in 50 ms",
          mech, (long long)pending, (long long)(st[10] - queries));
    CHECK(cudafd_watch_stream(n, (uintptr_t)s, &t) == CUDAFD_OK, "mech %d: watch again", mech);
    cudafd_stats(st, CUDAFD_STAT_COUNT);
    int64_t contexts = st[5];
    cudafd_notifier_destroy(n);
    CHECK(cudafd_cancel(stays, t) == CUDAFD_E_UNKNOWN_TOKEN, "another notifier's token");
    cudafd_release_idle();
    cudafd_stats(st, CUDAFD_STAT_COUNT);
    CHECK(st[3] == 1 && st[5] == contexts - 1, "mech %d: after the close, %lld waits pending, %lld records (%lld before)",
          mech, (long long)st[3], (long long)st[5], (long long)contexts);
    sim_ctx_destroy(mine); /* its work still running */
    cudafd_completion c[1];
    CHECK(collect(stays, c, 1, 20.0) == 1 && c[0].token == kept && c[0].status == 0, "the wait that stayed");
    cudafd_notifier_destroy(stays);
    cudafd_release_idle();
    sim_stats(after, CUDAFDSIM_STAT_COUNT);
    CHECK(after[6] == before[6], "mech %d: %lld calls given an event of a destroyed context", mech,
          (long long)(after[6] - before[6]));
    sim_stream_destroy(o);
    sim_ctx_destroy(other);
}

/* A hostfunc wait whose host function ran is asked about once more by the
 * watchdog (hostfunc.c). Cancelled then, with another notifier open, it still
 * holds its context's record until the watchdog takes it, and
 * cudafd_release_idle waits for that: after it, a context of one's own whose
 * work is over holds nothing and can be destroyed. The watchdog's query is
 * made slow (the simulator sleeps 5 ms in it), so without that wait the
 * record would be left, and the query would find the context destroyed. */
static void test_release_idle_waits_for_the_watchdog(void)
{
    int64_t before[CUDAFDSIM_STAT_COUNT], after[CUDAFDSIM_STAT_COUNT], st[CUDAFD_STAT_COUNT];
    sim_stats(before, CUDAFDSIM_STAT_COUNT);
    cudafd_notifier *stays = NULL, *n = NULL;
    cudafd_notifier_create(CUDAFD_MECH_EVENT, &stays);
    cudafd_notifier_create(CUDAFD_MECH_HOSTFUNC, &n);
    int kept = 0, rounds = 20;
    for (int i = 0; i < rounds; i++) {
        CUcontext mine = NULL, ignored;
        sim_ctx_create(0, &mine);
        CUstream s = new_stream(mine);
        sim_launch(s, 100 * 1000, 0);
        uint64_t t = 0;
        cudafd_watch_stream(n, (uintptr_t)s, &t);
        sim_delay_next_query(5 * 1000 * 1000); /* the next query is the watchdog's of this wait */
        sim_push(mine);
        sim_ctx_sync(); /* its side stream's host function has returned */
        sim_pop(&ignored);
        cudafd_cancel(n, t);
        cudafd_release_idle();
        cudafd_stats(st, CUDAFD_STAT_COUNT);
        kept += st[5] != 0; /* records left (the other notifier has none) */
        sim_stream_destroy(s);
        sim_ctx_destroy(mine);
    }
    cudafd_notifier_destroy(n);
    cudafd_notifier_destroy(stays);
    cudafd_release_idle();
    sim_stats(after, CUDAFDSIM_STAT_COUNT);
    CHECK(kept == 0, "a record kept after cudafd_release_idle in %d of %d rounds", kept, rounds);
    CHECK(after[6] == before[6], "%lld calls given an event of a destroyed context", (long long)(after[6] - before[6]));
}

static void check_counts_zero(void)
{
    int64_t st[CUDAFD_STAT_COUNT];
    double deadline = now_s() + 10.0;
    for (;;) {
        cudafd_release_idle(); /* the side streams kept for later notifiers */
        cudafd_stats(st, CUDAFD_STAT_COUNT);
        int live = 0;
        for (int i = 0; i <= 7; i++) /* the live counts */
            live += st[i] != 0;
        if (!live || now_s() > deadline)
            break;
        usleep(10000);
    }
    for (int i = 0; i <= 7; i++)
        CHECK(st[i] == 0, "%s = %lld at the end", cudafd_stat_name(i), (long long)st[i]);
    printf("stress: completed %lld (faults %lld), poller queries %lld, wakes %lld\n", (long long)st[8],
           (long long)st[9], (long long)st[10], (long long)st[11]);
}

/* `stress NAME` runs only the tests whose call names NAME (a substring),
 * with the set-up and the final check that every count is back to zero. */
static const char *only;
#define RUN(call)                                                                                                      \
    do {                                                                                                               \
        if (!only || strstr(#call, only))                                                                              \
            call;                                                                                                      \
    } while (0)

int main(int argc, char **argv)
{
    only = argc > 1 ? argv[1] : NULL;
    /* Faults here are kept to their own context (the simulator's default is
     * the H200's: every context of the process), so that one process can go
     * on to the next case in contexts a and b after each fault. */
    setenv("CUDAFD_SIM_FAULT_SCOPE", "context", 1);
    RUN(test_fork_during_load()); /* first: the driver is not loaded in this process yet */
    RUN(test_fork_inside_load());
    RUN(test_legacy_streams_of_two_contexts());
    load_sim();
    int rc = cudafd_driver_load();
    if (rc != CUDAFD_OK) {
        fprintf(stderr, "stress: cannot load the driver: %s\n", cudafd_last_error());
        return 2;
    }
    CUcontext a = NULL, b = NULL;
    sim_ctx_create(0, &a);
    sim_ctx_create(1, &b);
    RUN(test_bad_input(a));
    const int mechs[] = {CUDAFD_MECH_EVENT, CUDAFD_MECH_HOSTFUNC, CUDAFD_MECH_SPIN, CUDAFD_MECH_SYNCFD};
    int nmechs = 3;
    if (syncfd_expected()) { /* the simulator's fakes: syncfd runs every check below too */
        RUN(test_syncfd(a, sim_push, sim_pop, sim_event_create, sim_event_record, sim_event_destroy));
        RUN(test_syncfd_records(a, sim_push, sim_pop, sim_event_create, sim_event_record, sim_event_destroy));
        nmechs = 4;
    }
    for (int m = 0; m < nmechs; m++) {
        RUN(test_ordering(mechs[m], a, b));
        RUN(test_concurrent_watches_keep_record_order(mechs[m], a));
        RUN(test_concurrent_event_watches_keep_record_order(mechs[m], a));
        RUN(test_threads(mechs[m], a));
        RUN(test_cancel(mechs[m], a));
        RUN(test_close(mechs[m], a));
        RUN(test_events(mechs[m], a));
        RUN(test_fault(mechs[m]));
        RUN(test_fault_after_idle(mechs[m]));
        RUN(test_close_races_watches(mechs[m], a));
    }
    RUN(test_ask(a));
    RUN(test_fork_child(a));
    RUN(test_many_spinning());
    RUN(test_side_streams_kept());
    for (int how = 0; how < 4; how++)
        RUN(test_side_stream_left_waiting(how));
    RUN(test_hostfunc_launch_order(a));
    RUN(test_hostfunc_fault_during_launch());
    RUN(test_hostfunc_swept_during_launch());
    RUN(test_fork_child_closes());
    RUN(test_budgets_on_one_stream(a));
    RUN(test_nearby_lanes_share_a_round(a));
    RUN(test_primary_released_after_a_failed_first_stream());
    RUN(test_event_of_another_faulted_context(CUDAFD_MECH_EVENT));
    RUN(test_event_of_another_faulted_context(CUDAFD_MECH_HOSTFUNC));
    for (int i = 0; i < 4; i++)
        RUN(test_failed_watch_tells_the_context(i < 2 ? CUDAFD_MECH_EVENT : CUDAFD_MECH_HOSTFUNC, i % 2));
    for (int mech = CUDAFD_MECH_EVENT; mech <= CUDAFD_MECH_SPIN; mech++)
        RUN(test_primary_released_under_a_notifier(mech));
    RUN(test_release_idle_waits_for_the_poller());
    RUN(test_dropped_waits_leave(CUDAFD_MECH_EVENT));
    RUN(test_dropped_waits_leave(CUDAFD_MECH_SPIN));
    RUN(test_release_idle_waits_for_the_watchdog());
    RUN(test_release());
    /* the poller at its most eager (every wait asked about every microsecond)
     * and at a lazy budget (faults still surface, nothing stalls) */
    const int64_t budgets[] = {CUDAFD_MAX_LATENESS_MIN_NS, 20 * 1000 * 1000};
    for (int i = 0; i < 2; i++) {
        CHECK(cudafd_set_option(CUDAFD_OPT_MAX_LATENESS_NS, budgets[i]) == CUDAFD_OK, "max_lateness option");
        RUN(test_ordering(CUDAFD_MECH_EVENT, a, b));
        RUN(test_threads(CUDAFD_MECH_EVENT, a));
        RUN(test_cancel(CUDAFD_MECH_EVENT, a));
        RUN(test_fault(CUDAFD_MECH_EVENT));
    }
    cudafd_set_option(CUDAFD_OPT_MAX_LATENESS_NS, CUDAFD_MAX_LATENESS_DEFAULT_NS);
    sim_ctx_destroy(a);
    sim_ctx_destroy(b);
    check_counts_zero();
    printf("stress: %d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
