/*
 * stress_syncrec.c - the syncfd mechanism's per-stream records (syncfd.c,
 * record_get) on the simulator's fakes: whose syncpoint a stream signals,
 * and when a record's semaphore may be destroyed. Part of the stress test
 * (stress.c), run when the fakes are set up.
 *
 * Covered: a new stream handed the handle of a destroyed stream whose signal
 * is still queued signals a syncpoint of its own, so the old stream's
 * sync_file turns readable only once the old stream's work is done;
 * cudafd_release_idle with a notifier open lets go of the idle records, so a
 * context of the caller's own can be destroyed after it (and no semaphore of
 * it is destroyed later); and a record whose signal is still queued (its
 * wait cancelled) lets go of its context without destroying its semaphore
 * (CUDA forbids destroying it before the signal ran, and its context may go
 * right after); a watch whose sync_file cannot be made leaves nothing. The
 * simulator counts both misuses (stats 6 and 7).
 */
#include <errno.h>
#include <poll.h>
#include <unistd.h>

#include "stress.h"

#define MS (1000 * 1000LL)

int collect(cudafd_notifier *n, cudafd_completion *got, int want, double timeout);

static int64_t sim_stat(int i)
{
    int64_t st[CUDAFDSIM_STAT_COUNT];
    sim_stats(st, CUDAFDSIM_STAT_COUNT);
    return st[i];
}

static bool readable(int fd, int ms)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};
    return poll(&p, 1, ms) == 1 && (p.revents & POLLIN);
}

static void test_reused_handle(CUcontext ctx, CUresult (*push)(CUcontext), CUresult (*pop)(CUcontext *),
                               CUresult (*ev_create)(CUevent *, unsigned), CUresult (*ev_record)(CUevent, CUstream),
                               CUresult (*ev_destroy)(CUevent))
{
    cudafd_notifier *n = NULL;
    cudafd_notifier_create(CUDAFD_MECH_SYNCFD, &n);
    if (!n)
        return;
    CUcontext ignored;
    push(ctx);
    CUstream a = new_stream(ctx), b;
    CUevent a_done = NULL, b_done = NULL;
    ev_create(&a_done, CU_EVENT_DISABLE_TIMING);
    ev_create(&b_done, CU_EVENT_DISABLE_TIMING);
    sim_launch(a, 2000 * MS, 0);
    ev_record(a_done, a);
    uint64_t ta, tb;
    int fa = -1, fb = -1;
    CHECK(cudafd_watch_stream_fence(n, (uintptr_t)a, &ta, &fa) == CUDAFD_OK, "watch A");
    sim_stream_destroy(a); /* its work goes on */
    b = new_stream(ctx);
    CHECK(b == a, "the simulator hands a new stream the destroyed one's handle");
    sim_launch(b, 1 * MS, 0);
    CHECK(cudafd_watch_stream_fence(n, (uintptr_t)b, &tb, &fb) == CUDAFD_OK, "watch B");
    ev_record(b_done, b); /* done once B's signal ran */
    for (int i = 0; i < 20000 && cudafd_event_done((uintptr_t)b_done) != 1; i++)
        usleep(1000);
    CHECK(fa >= 0 && (!readable(fa, 0) || cudafd_event_done((uintptr_t)a_done) == 1),
          "A's sync_file turned readable at B's signal, while A's work ran");
    cudafd_completion c[2];
    CHECK(fb >= 0 && readable(fb, 20000), "B's sync_file never turned readable");
    CHECK(collect(n, c, 1, 20.0) == 1 && c[0].token == tb && c[0].status == 0, "B's wait completes first");
    CHECK(fa >= 0 && readable(fa, 20000), "A's sync_file never turned readable");
    CHECK(collect(n, c, 1, 20.0) == 1 && c[0].token == ta && c[0].status == 0, "A's wait completes");
    if (fa >= 0)
        close(fa);
    if (fb >= 0)
        close(fb);
    ev_destroy(a_done);
    ev_destroy(b_done);
    pop(&ignored);
    cudafd_notifier_destroy(n);
    sim_stream_destroy(b);
}

/* A context of the caller's own, its waits over, destroyed right after
 * cudafd_release_idle while another notifier stays open. */
static void test_released_with_a_notifier_open(void)
{
    int64_t dead = sim_stat(6), busy = sim_stat(7);
    cudafd_notifier *stays = NULL, *n = NULL;
    cudafd_notifier_create(CUDAFD_MECH_EVENT, &stays);
    cudafd_notifier_create(CUDAFD_MECH_SYNCFD, &n);
    CUcontext own = NULL;
    sim_ctx_create(0, &own);
    if (!stays || !n || !own)
        return;
    CUstream s = new_stream(own);
    sim_launch(s, 1 * MS, 0);
    uint64_t t;
    cudafd_completion c;
    CHECK(cudafd_watch_stream(n, (uintptr_t)s, &t) == CUDAFD_OK, "watch");
    CHECK(collect(n, &c, 1, 20.0) == 1 && c.status == 0, "the wait completes");
    cudafd_notifier_destroy(n);
    cudafd_release_idle();
    sim_stream_destroy(s);
    sim_ctx_destroy(own);
    cudafd_notifier_destroy(stays);
    cudafd_release_idle();
    CHECK(sim_stat(6) == dead, "a semaphore of a destroyed context reached the driver");
    CHECK(sim_stat(7) == busy, "a semaphore destroyed with a signal queued");
}

/* A cancelled wait's signal is still queued at cudafd_release_idle, and the
 * caller destroys the context right after it (cudafd.h lets it): the
 * semaphore is destroyed neither before its signal ran nor after its context
 * went, and nothing keeps the context's record. */
static void test_busy_record_let_go(void)
{
    int64_t dead = sim_stat(6), busy = sim_stat(7);
    cudafd_notifier *n = NULL;
    cudafd_notifier_create(CUDAFD_MECH_SYNCFD, &n);
    CUcontext own = NULL;
    sim_ctx_create(0, &own);
    if (!n || !own)
        return;
    CUstream s = new_stream(own);
    sim_launch(s, 300 * MS, 0);
    uint64_t t;
    CHECK(cudafd_watch_stream(n, (uintptr_t)s, &t) == CUDAFD_OK, "watch");
    CHECK(cudafd_cancel(n, t) == CUDAFD_OK, "cancel");
    cudafd_notifier_destroy(n);
    cudafd_release_idle();
    CHECK(sim_stat(7) == busy, "a semaphore destroyed with its signal queued");
    int64_t st[CUDAFD_STAT_COUNT];
    cudafd_stats(st, CUDAFD_STAT_COUNT);
    CHECK(st[5] == 0, "%lld context records kept by a record whose signal is queued", (long long)st[5]);
    sim_stream_destroy(s);
    sim_ctx_destroy(own);
    usleep(400 * 1000); /* past the kernel's end */
    cudafd_release_idle();
    CHECK(sim_stat(6) == dead, "a semaphore of a destroyed context reached the driver");
    CHECK(sim_stat(7) == busy, "a semaphore destroyed with its signal queued");
}

/* The caller's sync_file cannot be made (the process out of fds): the watch
 * fails, and leaves no wait, no completion for a token its caller never got,
 * and no fd; the next watch works. Both for a stream and for an event. */
static void test_fence_failure_leaves_nothing(CUcontext ctx, CUresult (*push)(CUcontext), CUresult (*pop)(CUcontext *),
                                              CUresult (*ev_create)(CUevent *, unsigned),
                                              CUresult (*ev_destroy)(CUevent))
{
    cudafd_notifier *n = NULL;
    cudafd_notifier_create(CUDAFD_MECH_SYNCFD, &n);
    if (!n)
        return;
    CUcontext ignored;
    push(ctx);
    CUstream s = new_stream(ctx);
    CUevent ev = NULL;
    ev_create(&ev, CU_EVENT_DISABLE_TIMING); /* never recorded: complete at once */
    for (int event = 0; event < 2; event++) {
        uint64_t t = 0;
        int fd = 7;
        sim_fail_next_fence(EMFILE);
        int rc = event ? cudafd_watch_event_fence(n, (uintptr_t)ev, &t, &fd)
                       : cudafd_watch_stream_fence(n, (uintptr_t)s, &t, &fd);
        CHECK(rc == CUDAFD_E_SYS && fd == -1, "%s watch whose sync_file failed: rc %d, fd %d", event ? "an event" : "a stream", rc, fd);
        CHECK(cudafd_notifier_pending(n) == 0, "a failed watch left a wait");
        cudafd_completion c[2];
        usleep(50 * 1000); /* the stream's work is done: a queued wait would complete meanwhile */
        CHECK(cudafd_drain(n, c, 2) == 0, "a failed watch left a completion");
        rc = event ? cudafd_watch_event_fence(n, (uintptr_t)ev, &t, &fd) : cudafd_watch_stream_fence(n, (uintptr_t)s, &t, &fd);
        CHECK(rc == CUDAFD_OK && fd >= 0, "the next watch: %s", cudafd_last_error());
        CHECK(collect(n, c, 1, 20.0) == 1 && c[0].token == t && c[0].status == 0, "the next watch completes");
        if (fd >= 0)
            close(fd);
    }
    ev_destroy(ev);
    pop(&ignored);
    cudafd_notifier_destroy(n);
    sim_stream_destroy(s);
}

void test_syncfd_records(CUcontext ctx, CUresult (*push)(CUcontext), CUresult (*pop)(CUcontext *),
                         CUresult (*ev_create)(CUevent *, unsigned), CUresult (*ev_record)(CUevent, CUstream),
                         CUresult (*ev_destroy)(CUevent))
{
    test_reused_handle(ctx, push, pop, ev_create, ev_record, ev_destroy);
    test_released_with_a_notifier_open();
    test_busy_record_let_go();
    test_fence_failure_leaves_nothing(ctx, push, pop, ev_create, ev_destroy);
}
