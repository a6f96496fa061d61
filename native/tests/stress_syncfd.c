/*
 * stress_syncfd.c - the syncfd mechanism through the C API, on the
 * simulator's NvSciSync and host1x fakes ($CUDAFD_SYNCFD_FAKE, set by
 * `make check`; the Makefile also starts every simulated syncpoint 16 counts
 * short of 2^32, so each stream's thresholds wrap). Part of the stress test
 * (stress.c runs the shared behaviour checks for syncfd too).
 *
 * Covered: the probe's report; per-point sync_file fds, readable in stream
 * order and only once their work is done, watched together in one epoll;
 * many waits on one stream completing in order; a sync_file for an event
 * target; a sync_file asked of another mechanism's notifier; a stream's
 * record dropped by a failed signal while an earlier wait still names it;
 * a faulted stream's waits, which its syncpoint never reports, let go
 * without a backstop period each; no fd left open by sync_files whose
 * thresholds never pass.
 */
#include <dirent.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "stress.h"

int collect(cudafd_notifier *n, cudafd_completion *got, int want, double timeout);

static bool readable(int fd, int ms)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};
    return poll(&p, 1, ms) == 1 && (p.revents & POLLIN);
}

bool syncfd_expected(void)
{
    const char *fake = getenv("CUDAFD_SYNCFD_FAKE");
    return fake && *fake;
}

static void test_report(void)
{
    const char *r = cudafd_syncfd_report();
    CHECK(r && strncmp(r, "available", 9) == 0, "the probe failed with the fakes: %s", r ? r : "(null)");
    CHECK(strstr(r, "\npoll | ") && strstr(r, "\nlibrary | "), "the report lists every step: %s", r);
    CHECK(cudafd_mechanism_available(CUDAFD_MECH_SYNCFD) == CUDAFD_OK, "syncfd unavailable");
}

/* K kernels on one stream, a sync_file after each: each turns readable only
 * once its own kernel ended, and they turn readable in order. */
static void test_fences(CUcontext ctx)
{
    enum { K = 6 };
    cudafd_notifier *n = NULL;
    CHECK(cudafd_notifier_create(CUDAFD_MECH_SYNCFD, &n) == CUDAFD_OK, "syncfd notifier");
    if (!n)
        return;
    CUstream s = new_stream(ctx);
    int fd[K];
    uint64_t tok[K];
    for (int i = 0; i < K; i++) {
        sim_launch(s, 30 * 1000 * 1000, 0);
        fd[i] = -1;
        CHECK(cudafd_watch_stream_fence(n, (uintptr_t)s, &tok[i], &fd[i]) == CUDAFD_OK && fd[i] >= 0,
              "watch with a sync_file");
    }
    int ep = epoll_create1(EPOLL_CLOEXEC);
    for (int i = 0; i < K; i++) {
        struct epoll_event e = {.events = EPOLLIN, .data.u32 = (uint32_t)i};
        CHECK(epoll_ctl(ep, EPOLL_CTL_ADD, fd[i], &e) == 0, "epoll_ctl");
    }
    CHECK(!readable(fd[K - 1], 0), "the last sync_file readable before its kernels ran");
    int next = 0;
    bool in_order = true;
    double deadline = now_s() + 20.0;
    while (next < K && now_s() < deadline) {
        struct epoll_event ev[K];
        int got = epoll_wait(ep, ev, K, 100);
        for (int j = 0; j < got; j++) {
            int i = (int)ev[j].data.u32;
            in_order &= i >= next;
            for (int m = next; m <= i; m++) /* all before it must be readable too */
                in_order &= readable(fd[m], 0);
            epoll_ctl(ep, EPOLL_CTL_DEL, fd[i], NULL);
            if (i >= next)
                next = i + 1;
        }
    }
    CHECK(next == K, "%d of %d sync_files turned readable", next, K);
    CHECK(in_order, "sync_files turned readable out of stream order");
    for (int i = 0; i < K; i++)
        CHECK(readable(fd[i], 0), "sync_file %d stopped being readable", i);
    cudafd_completion c[K];
    int have = collect(n, c, K, 20.0);
    CHECK(have == K, "%d of %d notifier completions", have, K);
    for (int i = 0; i < have; i++)
        CHECK(c[i].token == tok[i] && c[i].status == 0, "completion %d out of order or failed", i);
    close(ep);
    for (int i = 0; i < K; i++)
        close(fd[i]);
    cudafd_notifier_destroy(n);
    sim_stream_destroy(s);
}

/* Many thresholds armed on the one pollfd, from several streams at once. */
static void test_many_thresholds(CUcontext ctx)
{
    enum { S = 4, PER = 64 };
    cudafd_notifier *n = NULL;
    cudafd_notifier_create(CUDAFD_MECH_SYNCFD, &n);
    if (!n)
        return;
    CUstream s[S];
    uint64_t tok[S][PER];
    for (int i = 0; i < S; i++)
        s[i] = new_stream(ctx);
    for (int k = 0; k < PER; k++)
        for (int i = 0; i < S; i++) {
            sim_launch(s[i], 100 * 1000, 0);
            CHECK(cudafd_watch_stream(n, (uintptr_t)s[i], &tok[i][k]) == CUDAFD_OK, "watch");
        }
    static cudafd_completion c[S * PER];
    int have = collect(n, c, S * PER, 30.0);
    CHECK(have == S * PER, "%d of %d completions", have, S * PER);
    int seen[S] = {0};
    bool order = true;
    for (int j = 0; j < have; j++)
        for (int i = 0; i < S; i++)
            for (int k = 0; k < PER; k++)
                if (c[j].token == tok[i][k]) {
                    order &= k == seen[i]++;
                    order &= c[j].status == 0;
                }
    CHECK(order, "a stream's waits completed out of order, twice, or failed");
    cudafd_notifier_destroy(n);
    for (int i = 0; i < S; i++)
        sim_stream_destroy(s[i]);
}

/* A signal that fails as one on a destroyed context's semaphore does makes
 * the watch drop its stream's record and retry with a new one, while an
 * earlier wait still names the old record (ASan sees it freed too soon). */
static void test_dropped_record(CUcontext ctx)
{
    cudafd_notifier *n = NULL;
    cudafd_notifier_create(CUDAFD_MECH_SYNCFD, &n);
    if (!n)
        return;
    CUstream s = new_stream(ctx);
    uint64_t tok[2];
    sim_launch(s, 100 * 1000 * 1000, 0);
    CHECK(cudafd_watch_stream(n, (uintptr_t)s, &tok[0]) == CUDAFD_OK, "watch");
    sim_fail_next_signal(CUDA_ERROR_INVALID_HANDLE);
    sim_launch(s, 10 * 1000 * 1000, 0);
    CHECK(cudafd_watch_stream(n, (uintptr_t)s, &tok[1]) == CUDAFD_OK, "a watch retries past a dropped record");
    cudafd_completion c[2];
    int have = collect(n, c, 2, 30.0);
    CHECK(have == 2 && c[0].token == tok[0] && c[1].token == tok[1] && c[0].status == 0 && c[1].status == 0,
          "%d completions, in order and successful", have);
    cudafd_notifier_destroy(n);
    sim_stream_destroy(s);
}

static void test_event_fence_and_bad_input(CUcontext ctx, CUresult (*push)(CUcontext), CUresult (*pop)(CUcontext *),
                                           CUresult (*ev_create)(CUevent *, unsigned),
                                           CUresult (*ev_record)(CUevent, CUstream), CUresult (*ev_destroy)(CUevent))
{
    cudafd_notifier *n = NULL, *e = NULL;
    cudafd_notifier_create(CUDAFD_MECH_SYNCFD, &n);
    cudafd_notifier_create(CUDAFD_MECH_EVENT, &e);
    if (!n || !e)
        return;
    CUstream s = new_stream(ctx);
    CUcontext ignored;
    push(ctx);
    CUevent ev = NULL;
    ev_create(&ev, CU_EVENT_DISABLE_TIMING);
    sim_launch(s, 20 * 1000 * 1000, 0);
    ev_record(ev, s);
    uint64_t t;
    int fd = -1;
    CHECK(cudafd_watch_event_fence(n, (uintptr_t)ev, &t, &fd) == CUDAFD_OK && fd >= 0, "event fence");
    CHECK(fd >= 0 && readable(fd, 20000), "the event's sync_file never turned readable");
    cudafd_completion c;
    CHECK(collect(n, &c, 1, 20.0) == 1 && c.token == t && c.status == 0, "the event wait's completion");
    if (fd >= 0)
        close(fd);
    fd = 7;
    CHECK(cudafd_watch_stream_fence(e, (uintptr_t)s, &t, &fd) == CUDAFD_E_INVALID && fd == -1,
          "a sync_file from an event-mechanism notifier");
    CHECK(cudafd_watch_stream_fence(n, (uintptr_t)s, &t, NULL) == CUDAFD_E_INVALID, "NULL fence_fd");
    CHECK(cudafd_notifier_pending(e) == 0 && cudafd_notifier_pending(n) == 0, "a refused watch left a wait");
    ev_destroy(ev);
    pop(&ignored);
    cudafd_notifier_destroy(n);
    cudafd_notifier_destroy(e);
    sim_stream_destroy(s);
}

/* The waits left in a faulted stream's lane (the fault was delivered to
 * them all, detached) have thresholds the syncpoint never passes, since the
 * fault dropped their signals: each head goes through its event, which reads
 * the fault. The syncpoint that did not report one head does not report the
 * next either, so the lane must empty without a backstop period per wait:
 * counted in poller wakes, not time (each such period is a timed sleep). */
static void test_unreported_heads(void)
{
    enum { K = 40 };
    CUcontext c = NULL;
    sim_ctx_create(0, &c);
    cudafd_notifier *n = NULL;
    cudafd_notifier_create(CUDAFD_MECH_SYNCFD, &n);
    if (!c || !n)
        return;
    CUstream s = new_stream(c), f = new_stream(c);
    int64_t st[CUDAFD_STAT_COUNT];
    cudafd_stats(st, CUDAFD_STAT_COUNT);
    int64_t pending0 = st[3];
    sim_launch(s, 60000000000ull, 0); /* 60 s: only the fault ends it */
    int watched = 0;
    for (int i = 0; i < K; i++) {
        uint64_t t;
        watched += cudafd_watch_stream(n, (uintptr_t)s, &t) == CUDAFD_OK;
    }
    sim_launch(f, 1000000, CUDA_ERROR_ILLEGAL_ADDRESS);
    cudafd_completion got[K];
    int have = collect(n, got, K, 30.0);
    CHECK(watched == K && have == K, "%d watched, %d completions after the fault", watched, have);
    cudafd_stats(st, CUDAFD_STAT_COUNT);
    int64_t wakes0 = st[11];
    double deadline = now_s() + 30.0;
    while (cudafd_stats(st, CUDAFD_STAT_COUNT), st[3] != pending0 && now_s() < deadline)
        usleep(1000);
    CHECK(st[3] == pending0, "%lld of the faulted stream's waits still in its lane", (long long)(st[3] - pending0));
    CHECK(st[11] - wakes0 < K / 2, "%lld poller wakes to let %d unreported waits go", (long long)(st[11] - wakes0), K);
    cudafd_notifier_destroy(n);
    cudafd_release_idle();
    sim_stream_destroy(s);
    sim_stream_destroy(f);
    sim_ctx_destroy(c);
}

static int open_fds(void)
{
    int k = 0;
    DIR *d = opendir("/proc/self/fd");
    if (!d)
        return -1;
    while (readdir(d))
        k++;
    closedir(d);
    return k;
}

/* Sync_files whose thresholds never pass (a fault dropped their signals):
 * the caller's, closed at once, and the poller's throw-away ones, made at
 * each pollfd wake for the head of the faulted stream's lane (another
 * stream's thresholds wake it). The fake device, like the kernel, frees a
 * sync_file with its last fd: none is left open. */
static void test_sync_files_freed(void)
{
    enum { K = 20 };
    int before = open_fds();
    CUcontext c = NULL;
    sim_ctx_create(0, &c);
    cudafd_notifier *n = NULL;
    cudafd_notifier_create(CUDAFD_MECH_SYNCFD, &n);
    if (!c || !n)
        return;
    CUstream s = new_stream(c), q = new_stream(c), f = new_stream(c);
    sim_launch(s, 60000000000ull, 0); /* 60 s: only the fault ends it */
    uint64_t t;
    for (int i = 0; i < K; i++) {
        int fd = -1;
        CHECK(cudafd_watch_stream_fence(n, (uintptr_t)s, &t, &fd) == CUDAFD_OK && fd >= 0, "watch with a sync_file");
        if (fd >= 0)
            close(fd);
    }
    cudafd_completion got[2 * K];
    for (int i = 0; i < K; i++) { /* each pollfd wake asks s's head through a throw-away sync_file */
        sim_launch(q, 100 * 1000, 0);
        cudafd_watch_stream(n, (uintptr_t)q, &t);
        CHECK(collect(n, got, 1, 30.0) == 1 && got[0].token == t && got[0].status == 0, "q's wait %d", i);
    }
    sim_launch(f, 1000000, CUDA_ERROR_ILLEGAL_ADDRESS);
    CHECK(collect(n, got, K, 30.0) == K, "the faulted stream's waits");
    cudafd_notifier_destroy(n);
    cudafd_release_idle(); /* returns once the poller, and its pollfd, are gone */
    sim_stream_destroy(s);
    sim_stream_destroy(q);
    sim_stream_destroy(f);
    sim_ctx_destroy(c);
    int after = open_fds();
    CHECK(after == before, "%d fds left open by sync_files whose thresholds never passed", after - before);
}

void test_syncfd(CUcontext ctx, CUresult (*push)(CUcontext), CUresult (*pop)(CUcontext *),
                 CUresult (*ev_create)(CUevent *, unsigned), CUresult (*ev_record)(CUevent, CUstream),
                 CUresult (*ev_destroy)(CUevent))
{
    test_report();
    test_fences(ctx);
    test_many_thresholds(ctx);
    test_dropped_record(ctx);
    test_event_fence_and_bad_input(ctx, push, pop, ev_create, ev_record, ev_destroy);
    test_unreported_heads();
    test_sync_files_freed();
}
