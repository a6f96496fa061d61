/*
 * stress_release.c - waits whose results went before the poller popped them
 * leave with cudafd_release_idle, so that a context of the caller's own can
 * be destroyed right after it (cudafd.h). Part of the stress test (stress.c).
 *
 * Covered: a wait whose end an ask took (event and spin notifiers), a wait
 * delivered early by a fault sweep (event: left in its lane; hostfunc: ended
 * at once), and a pooled event whose record fails while a probe (an ask's
 * unlocked query) may be asking about it. Each case keeps another notifier
 * open, as a long-lived program does, and checks the simulator's count of
 * calls given a dead event (index 6) did not move after the context went.
 */
#include <pthread.h>
#include <unistd.h>

#include "stress.h"

#define MS (1000 * 1000LL)

static int64_t dead_calls(void)
{
    int64_t st[CUDAFDSIM_STAT_COUNT];
    sim_stats(st, CUDAFDSIM_STAT_COUNT);
    return st[6];
}

static int64_t core_stat(int i)
{
    int64_t st[CUDAFD_STAT_COUNT];
    cudafd_stats(st, CUDAFD_STAT_COUNT);
    return st[i];
}

/* An ask found the wait over; its notifier's budget (1 s) keeps the poller
 * from asking its lane for 250 ms. */
static void test_taken_wait_leaves(int mech, int asking)
{
    int64_t dead = dead_calls(), records = core_stat(5);
    cudafd_notifier *stays = NULL, *n = NULL;
    cudafd_notifier_create(CUDAFD_MECH_EVENT, &stays);
    cudafd_notifier_create(mech, &n);
    cudafd_notifier_set_max_lateness(n, 1000 * MS);
    if (asking)
        cudafd_notifier_set_asking(n, 1);
    CUcontext mine = NULL;
    sim_ctx_create(0, &mine);
    CUstream s = new_stream(mine);
    sim_launch(s, 2 * MS, 0);
    uint64_t t = 0;
    CHECK(cudafd_watch_stream(n, (uintptr_t)s, &t) == CUDAFD_OK, "mech %d: watch", mech);
    int64_t status = -1;
    int rc = 0;
    for (double end = now_s() + 5; (rc = cudafd_ask_token(n, t, &status)) == 0 && now_s() < end;)
        usleep(100);
    CHECK(rc == 1 && status == 0, "mech %d asking %d: the ask took the end (rc %d)", mech, asking, rc);
    cudafd_release_idle();
    CHECK(core_stat(3) == 0 && core_stat(5) == records,
          "mech %d asking %d: after the ask and cudafd_release_idle, %lld waits pending, %lld records (%lld before)",
          mech, asking, (long long)core_stat(3), (long long)core_stat(5), (long long)records);
    sim_stream_destroy(s);
    sim_ctx_destroy(mine);
    usleep(300 * 1000); /* past the poller's next ask of that lane */
    CHECK(dead_calls() == dead, "mech %d asking %d: %lld calls given a dead event", mech, asking,
          (long long)(dead_calls() - dead));
    cudafd_notifier_destroy(n);
    cudafd_notifier_destroy(stays);
    cudafd_release_idle();
}

/* Another stream's fault reaches a wait on 3 s of work through the sweep;
 * its event notifier's budget (1 s) keeps the poller from its lane for
 * 250 ms, a hostfunc wait's host function is still queued (the watchdog's
 * period made 1 s, so that only cudafd_release_idle ends it). */
static void test_swept_wait_leaves(int mech)
{
    int64_t dead = dead_calls();
    CHECK(cudafd_set_option(CUDAFD_OPT_WATCHDOG_NS, 1000 * MS) == CUDAFD_OK, "watchdog period 1 s");
    cudafd_notifier *stays = NULL, *n = NULL, *slow = NULL;
    cudafd_notifier_create(CUDAFD_MECH_EVENT, &stays);
    cudafd_notifier_create(CUDAFD_MECH_EVENT, &n);
    cudafd_notifier_create(mech, &slow);
    cudafd_notifier_set_max_lateness(slow, 1000 * MS);
    CUcontext mine = NULL;
    sim_ctx_create(0, &mine);
    CUstream s1 = new_stream(mine), s2 = new_stream(mine);
    sim_launch(s1, 3000 * MS, 0);
    uint64_t t1 = 0, t2 = 0;
    CHECK(cudafd_watch_stream(slow, (uintptr_t)s1, &t1) == CUDAFD_OK, "mech %d: watch the long work", mech);
    sim_launch(s2, 5 * MS, CUDA_ERROR_ILLEGAL_ADDRESS);
    CHECK(cudafd_watch_stream(n, (uintptr_t)s2, &t2) == CUDAFD_OK, "mech %d: watch the fault", mech);
    cudafd_completion c[1];
    CHECK(collect(n, c, 1, 5.0) == 1 && c[0].status == CUDA_ERROR_ILLEGAL_ADDRESS, "mech %d: the fault", mech);
    CHECK(collect(slow, c, 1, 1.0) == 1 && c[0].token == t1 && c[0].status == CUDA_ERROR_ILLEGAL_ADDRESS,
          "mech %d: the swept wait", mech);
    cudafd_release_idle();
    CHECK(core_stat(3) == 0, "mech %d: every wait reported, %lld pending after cudafd_release_idle", mech,
          (long long)core_stat(3));
    sim_stream_destroy(s1);
    sim_stream_destroy(s2);
    sim_ctx_destroy(mine);
    usleep(300 * 1000); /* past the poller's next ask of the slow lane, and the watchdog's rounds */
    CHECK(dead_calls() == dead, "mech %d: %lld calls given a dead event", mech, (long long)(dead_calls() - dead));
    cudafd_notifier_destroy(n);
    cudafd_notifier_destroy(slow);
    cudafd_notifier_destroy(stays);
    cudafd_release_idle();
    CHECK(cudafd_set_option(CUDAFD_OPT_WATCHDOG_NS, 10 * MS) == CUDAFD_OK, "watchdog period back");
}

struct asker {
    cudafd_notifier *n;
    uint64_t token;
};

static void *ask_once(void *p)
{
    struct asker *a = p;
    int64_t status;
    cudafd_ask_token(a->n, a->token, &status);
    return NULL;
}

/* An ask queries a wait's event unlocked (a probe: 300 ms, the simulator
 * holding its query); meanwhile the poller's backstop pops that wait (its
 * event pooled, not destroyed, as a probe is on), the context faults, and a
 * new watch takes the event and fails to record it. The event must not be
 * destroyed under the ask's query. */
static void test_record_failure_during_a_probe(void)
{
    int64_t dead = dead_calls();
    cudafd_notifier *n = NULL;
    cudafd_notifier_create(CUDAFD_MECH_SPIN, &n);
    cudafd_notifier_set_asking(n, 1); /* the poller asks its lanes only every 10 ms */
    CUcontext mine = NULL;
    sim_ctx_create(0, &mine);
    CUstream s = new_stream(mine), f = new_stream(mine);
    struct asker a = {n, 0};
    CHECK(cudafd_watch_stream(n, (uintptr_t)s, &a.token) == CUDAFD_OK, "watch");
    sim_delay_next_query(300 * MS);
    pthread_t th;
    pthread_create(&th, NULL, ask_once, &a);
    usleep(50 * 1000); /* the backstop popped the wait: its event is in the pool */
    sim_launch(f, 1 * MS, CUDA_ERROR_ILLEGAL_ADDRESS);
    usleep(20 * 1000); /* the context has faulted */
    uint64_t t = 0;
    CHECK(cudafd_watch_stream(n, (uintptr_t)s, &t) == CUDAFD_E_CUDA, "a watch in the faulted context fails");
    pthread_join(th, NULL);
    CHECK(dead_calls() == dead, "%lld calls given a dead event (the ask's query)", (long long)(dead_calls() - dead));
    cudafd_notifier_destroy(n);
    cudafd_release_idle();
    sim_stream_destroy(s);
    sim_stream_destroy(f);
    sim_ctx_destroy(mine);
}

void test_release(void)
{
    test_taken_wait_leaves(CUDAFD_MECH_EVENT, 0);
    test_taken_wait_leaves(CUDAFD_MECH_SPIN, 1);
    test_swept_wait_leaves(CUDAFD_MECH_EVENT);
    test_swept_wait_leaves(CUDAFD_MECH_HOSTFUNC);
    test_record_failure_during_a_probe();
}
