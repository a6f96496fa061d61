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
 * For hostfunc: a wait put off (the host functions' budget spent by another
 * context) and then cancelled, or its notifier closed, ends at once; a
 * release while an ask runs on another thread waits for it and frees what it
 * should; a release while a watch's own launch is held up does not destroy
 * the side stream under it. A release while another thread closes the last
 * notifier still waits for the poller's query of a closed notifier's wait.
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

/* Another context's waits hold every host function of the budget (behind
 * 300 ms of work), so a watch on an idle stream of `mine` is put off. */
struct spent_budget {
    cudafd_notifier *n;
    CUcontext other;
    CUstream busy;
    int watched;
};

static void spend_budget(struct spent_budget *b)
{
    cudafd_notifier_create(CUDAFD_MECH_HOSTFUNC, &b->n);
    sim_ctx_create(0, &b->other);
    b->busy = new_stream(b->other);
    sim_launch(b->busy, 300 * MS, 0);
    uint64_t t = 0;
    int64_t before = -1;
    for (b->watched = 0; b->watched < 64 && core_stat(7) > before; b->watched++) { /* until one is put off */
        before = core_stat(7);
        CHECK(cudafd_watch_stream(b->n, (uintptr_t)b->busy, &t) == CUDAFD_OK, "watch %d of the busy stream",
              b->watched);
    }
}

/* Its work over (every wait reported), the other context goes. */
static void unspend_budget(struct spent_budget *b)
{
    cudafd_completion c[64];
    CHECK(collect(b->n, c, b->watched, 5.0) == b->watched, "the busy stream's %d waits", b->watched);
    cudafd_notifier_destroy(b->n);
    sim_stream_destroy(b->busy);
    sim_ctx_destroy(b->other);
    cudafd_release_idle();
}

static void test_put_off_wait_let_go(bool by_close)
{
    struct spent_budget b;
    spend_budget(&b);
    cudafd_notifier *n = NULL;
    cudafd_notifier_create(CUDAFD_MECH_HOSTFUNC, &n);
    CUcontext mine = NULL;
    sim_ctx_create(0, &mine);
    CUstream s = new_stream(mine);
    uint64_t t = 0;
    int64_t pending = core_stat(3);
    CHECK(cudafd_watch_stream(n, (uintptr_t)s, &t) == CUDAFD_OK, "watch, put off");
    if (by_close)
        cudafd_notifier_close(n);
    else
        CHECK(cudafd_cancel(n, t) == CUDAFD_OK, "cancel");
    CHECK(core_stat(3) == pending, "close %d: the wait put off ended at once (%lld pending, %lld before)", by_close,
          (long long)core_stat(3), (long long)pending);
    int64_t dead = dead_calls();
    cudafd_release_idle();
    sim_stream_destroy(s);
    sim_ctx_destroy(mine); /* its own work is over: cudafd.h allows it now */
    usleep(50 * 1000);     /* past the watchdog's next rounds */
    CHECK(dead_calls() == dead, "close %d: %lld calls given a dead event", by_close,
          (long long)(dead_calls() - dead));
    cudafd_notifier_destroy(n);
    unspend_budget(&b);
}

/* cudafd_release_idle while another thread's ask queries (300 ms held up):
 * it waits for the ask, then frees the idle context's side streams. */
static void test_release_during_an_ask(void)
{
    cudafd_notifier *asker = NULL, *n = NULL;
    cudafd_notifier_create(CUDAFD_MECH_EVENT, &asker);
    cudafd_notifier_set_max_lateness(asker, 1000 * MS);
    cudafd_notifier_create(CUDAFD_MECH_HOSTFUNC, &n);
    CUcontext other = NULL, mine = NULL;
    sim_ctx_create(0, &other);
    sim_ctx_create(0, &mine);
    CUstream so = new_stream(other), s = new_stream(mine);
    sim_launch(so, 500 * MS, 0);
    struct asker a = {asker, 0};
    CHECK(cudafd_watch_stream(asker, (uintptr_t)so, &a.token) == CUDAFD_OK, "watch the other context");
    uint64_t t = 0;
    sim_launch(s, 1 * MS, 0);
    CHECK(cudafd_watch_stream(n, (uintptr_t)s, &t) == CUDAFD_OK, "hostfunc watch");
    cudafd_completion c[1];
    CHECK(collect(n, c, 1, 5.0) == 1 && c[0].status == 0, "the hostfunc wait");
    int64_t records = core_stat(5);
    sim_delay_next_query(300 * MS);
    pthread_t th;
    pthread_create(&th, NULL, ask_once, &a);
    usleep(50 * 1000); /* the ask is in its query */
    int released = cudafd_release_idle();
    CHECK(released > 0 && core_stat(5) < records,
          "a release during an ask freed %d side streams, %lld records of %lld", released,
          (long long)core_stat(5), (long long)records);
    int64_t dead = dead_calls();
    sim_stream_destroy(s);
    sim_ctx_destroy(mine);
    pthread_join(th, NULL);
    cudafd_notifier_destroy(n);
    cudafd_notifier_destroy(asker);
    cudafd_release_idle();
    CHECK(dead_calls() == dead, "%lld calls given a dead event", (long long)(dead_calls() - dead));
    sim_stream_destroy(so);
    sim_ctx_destroy(other);
}

static void *close_later(void *p)
{
    usleep(50 * 1000);
    cudafd_notifier_close(p);
    return NULL;
}

/* cudafd_release_idle waits for the poller to take a closed notifier's wait
 * out while the poller is inside an 800 ms query of it; meanwhile another
 * thread closes the last notifier open (a hostfunc one, whose watchdog's
 * rounds wake the release). The release must still wait for the poller to
 * leave that query before it returns and the context is destroyed. */
static void test_release_while_the_last_notifier_closes(void)
{
    cudafd_notifier *n = NULL, *h = NULL;
    cudafd_notifier_create(CUDAFD_MECH_EVENT, &n);
    cudafd_notifier_create(CUDAFD_MECH_HOSTFUNC, &h);
    CUcontext mine = NULL, other = NULL;
    sim_ctx_create(0, &mine);
    sim_ctx_create(0, &other);
    CUstream s = new_stream(mine), so = new_stream(other);
    sim_launch(s, 3000 * MS, 0);
    uint64_t t = 0, th = 0;
    CHECK(cudafd_watch_stream(n, (uintptr_t)s, &t) == CUDAFD_OK, "watch");
    usleep(5 * 1000);
    sim_delay_next_query(800 * MS);
    usleep(20 * 1000); /* the poller is in that query */
    sim_launch(so, 3000 * MS, 0);
    CHECK(cudafd_watch_stream(h, (uintptr_t)so, &th) == CUDAFD_OK, "hostfunc watch");
    int64_t dead = dead_calls();
    cudafd_notifier_close(n);
    pthread_t closer;
    pthread_create(&closer, NULL, close_later, h);
    cudafd_release_idle();
    pthread_join(closer, NULL);
    sim_stream_destroy(s);
    sim_ctx_destroy(mine);
    usleep(1000 * 1000); /* past the held-up query */
    CHECK(dead_calls() == dead, "%lld calls given a dead event after the release", (long long)(dead_calls() - dead));
    cudafd_notifier_destroy(n);
    cudafd_notifier_destroy(h);
    cudafd_release_idle();
    sim_stream_destroy(so);
    sim_ctx_destroy(other);
}

/* A watch's own launch is held up 300 ms; meanwhile its context faults, the
 * watchdog ends the wait, and another thread closes the notifier and releases.
 * The side stream must outlive the launch: destroyed under it, its handle
 * would go to the next stream made (here `later`'s), and the launch with it. */
static void test_release_during_a_launch(void)
{
    CHECK(cudafd_set_option(CUDAFD_OPT_WATCHDOG_NS, 20 * MS) == CUDAFD_OK, "watchdog period 20 ms");
    struct watcher w = {NULL, NULL, 0, 0};
    CUcontext ctx = NULL;
    cudafd_notifier_create(CUDAFD_MECH_HOSTFUNC, &w.n);
    sim_ctx_create(0, &ctx);
    w.s = new_stream(ctx);
    CHECK(cudafd_prepare(w.n, (uintptr_t)w.s) == CUDAFD_OK, "prepare (its side streams)");
    sim_launch(w.s, 20 * MS, CUDA_ERROR_ILLEGAL_ADDRESS);
    sim_delay_next_host_launch(300 * MS);
    pthread_t th;
    pthread_create(&th, NULL, watch_on_a_thread, &w);
    usleep(150 * 1000); /* the fault, and the watchdog's query of the wait */
    cudafd_notifier_close(w.n);
    cudafd_release_idle();
    CUcontext later = NULL;
    sim_ctx_create(0, &later);
    CUstream made[40]; /* more than a context's side streams (32) */
    for (int i = 0; i < 40; i++)
        made[i] = new_stream(later);
    int64_t st[CUDAFDSIM_STAT_COUNT];
    sim_stats(st, CUDAFDSIM_STAT_COUNT);
    int64_t ran = st[4];
    pthread_join(th, NULL);
    usleep(50 * 1000);
    sim_stats(st, CUDAFDSIM_STAT_COUNT);
    CHECK(st[4] == ran, "%lld host functions ran on streams made after the release", (long long)(st[4] - ran));
    cudafd_notifier_destroy(w.n);
    cudafd_release_idle();
    for (int i = 0; i < 40; i++)
        sim_stream_destroy(made[i]);
    sim_ctx_destroy(later);
    sim_stream_destroy(w.s);
    sim_ctx_destroy(ctx);
    CHECK(cudafd_set_option(CUDAFD_OPT_WATCHDOG_NS, 10 * MS) == CUDAFD_OK, "watchdog period back");
}

void test_release(void)
{
    test_taken_wait_leaves(CUDAFD_MECH_EVENT, 0);
    test_taken_wait_leaves(CUDAFD_MECH_SPIN, 1);
    test_swept_wait_leaves(CUDAFD_MECH_EVENT);
    test_swept_wait_leaves(CUDAFD_MECH_HOSTFUNC);
    test_record_failure_during_a_probe();
    test_put_off_wait_let_go(false);
    test_put_off_wait_let_go(true);
    test_release_while_the_last_notifier_closes();
    test_release_during_an_ask();
    test_release_during_a_launch();
}
