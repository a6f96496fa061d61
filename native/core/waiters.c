/*
 * waiters.c - the poller: the one native thread that finds finished waits of
 * the event and spin mechanisms.
 *
 * Facts relied on:
 *  - A stream runs its work in order, so a record completes no later than any
 *    record made after it on the same stream: the poller queries only the
 *    head wait of each lane (waits.c), and completes a lane's waits in order.
 *  - cuEventQuery costs no system call on a real GPU (it reads a semaphore
 *    the GPU writes), but it is not free: 0.35 us of the poller's CPU with
 *    the driver's default 8 hardware queues, 1.4 us with 32, against ~8 us
 *    for a wake (H200). On one stream the wakes dominate; on 64 streams
 *    with 32 queues the queries are most of the poller's CPU
 *    (docs/performance.md, "Asking by a word in host memory").
 *  - A thread woken from a sleep in a VM comes back 10-50 us late when woken
 *    by another thread, but a short timed sleep (1 us of timer slack) is
 *    prompt, and it costs the sleeping thread only its own few microseconds
 *    of CPU (H200 host, docs/performance.md). So the poller sleeps on
 *    its own timer between query rounds rather than waiting to be told.
 *  - After a fault, every query of an event of the context reports the
 *    sticky error at once (bench/fault_bystanders.py), so a lane polled
 *    every max_lateness surfaces a fault within that time, and
 *    cfd_note_fault hands it to every wait of the context.
 *
 * The waiting policy. A lane whose head wait has run for `age` is asked again
 * after
 *
 *     interval = clamp(age / POLL_RATIO, budget / POLL_FLOOR_DIV, budget)
 *
 * where budget is the head wait's max_lateness (its notifier's, default
 * CUDAFD_OPT_MAX_LATENESS_NS). Short waits are asked every ~100
 * microseconds, so they are found soon after they end; a long wait is asked
 * less often, never less than once per budget, so a wait is found at most
 * budget (plus the machine's wake-up time) after its work ends, whatever its
 * length or that of any other wait, and a long wait costs about
 * 1/budget wakes per second. The interval depends on nothing but the wait's
 * own age: no history, no prediction. A lane due within half of its
 * interval joins a round that runs anyway, so lanes due at nearby times
 * share one wake: never asked later than its own plan, and only a little
 * more often, since its next interval counts from that ask. Spin lanes are
 * asked in every round, and while one is pending the poller does not sleep
 * at all. The lanes of a spin notifier's waits whose callers ask about them
 * themselves (CFD_LANE_ASKED, ask.c) are asked every max(budget,
 * ASKED_BACKSTOP_NS): a backstop, and the popping of the waits the callers
 * took.
 *
 * Why these numbers (H200 host, bench/policy_sweep.py):
 * each wake of the poller costs ~8 us of CPU there, and handing a completion
 * to an event loop asleep in epoll costs 60-150 us whatever finds it (the
 * spin mechanism's lateness), so asking more often than every ~100 us buys
 * little lateness for much CPU. Against a tenth of a 200 us budget and
 * 1/32 of the age, this schedule cut the CPU by a quarter to a half (64
 * streams: 1.12 -> 0.83 cores) for 20-50% more lateness. On 4, 16 and 64
 * streams of random 50-3000 us kernels, asking lanes due within half of
 * their interval instead of a quarter cut the poller's wakes per wait by a
 * quarter to a third for ~3% more queries, and the process's median CPU by
 * 18%, 9% and 5%, at the same lateness (H100 host, docs/performance.md);
 * three quarters saved no more wakes.
 *
 * The poller sleeps in poll(2) on a timerfd, not on a condition variable,
 * so a watching thread whose new lane is due before the poller's next round
 * moves the timer earlier instead of waking it: one system call, no wake.
 *
 * A round asks at most SNAP_MAX lanes. When more are due, the next round
 * starts at the first lane left out and goes round the list, so lanes due at
 * every round (more than SNAP_MAX spin lanes) cannot keep the others from
 * being asked.
 *
 * Ownership: a lane in the active list is the poller's, which alone pops its
 * head and frees it once empty, so the lanes and head events of a snapshot
 * it queries unlocked stay valid. A lane's waits are therefore completed by
 * exactly one thread, in order.
 *
 * A wait its caller let go of (cancelled, or its notifier closed) is taken
 * out of its lane at the next round (reap_dropped), not asked about until
 * its work ends. The poller starts with the first active lane and exits
 * once no notifier is open; the detached waits left then are dropped
 * (drop_all).
 *
 * syncfd lanes (syncfd.c). The poller also sleeps on the host1x pollfd that
 * every syncfd point arms. When it wakes readable, every syncfd lane's head
 * is asked (cfd_syncfd_check: host1x, no driver call; its throw-away
 * sync_file is polled once, at once, so the kernel's fence timeout, which
 * signals a sync_file 30 s after its first poll, never reaches it, and the
 * pollfd has none); a head that passed is
 * asked about its event (cuEventQuery of the event behind its signal: a
 * fault, or the record still a moment behind the signal, when the driver is
 * asked again soon) and completes, and the next head is asked in the
 * following round. The
 * driver is asked about a syncfd head only on the backstop's interval
 * (max(budget, CUDAFD_SYNCFD_BACKSTOP_MS)), which completes it if the
 * syncpoint never moved (a fault, or host1x missing a wake). A head so
 * completed says the syncpoint lags its events, so the next head's event is
 * asked at once, and the next, until one is not done: the waits host1x does
 * not report are found in one round each, not one backstop period each.
 */
#include <errno.h>
#include <poll.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"

#define SNAP_MAX 512
/* (compile-time knobs like these are for measuring alternatives: bench/policy_sweep.py) */
#ifndef POLL_RATIO
#define POLL_RATIO 16 /* a wait is asked again after 1/16 of its age ... */
#endif
#ifndef POLL_FLOOR_DIV
#define POLL_FLOOR_DIV 4 /* ... but not sooner than a quarter of its budget, nor later than the budget */
#endif
#ifndef SPIN_RELAX
#define SPIN_RELAX 64 /* pause instructions between two spinning rounds */
#endif
#ifndef COALESCE_PCT
#define COALESCE_PCT 50 /* a lane may be asked this percentage of its interval early */
#endif
/* A lane whose waits their callers ask about themselves (CFD_LANE_ASKED) is
 * asked at most this often: a backstop for a caller that stops asking, and
 * the reaping of the waits they took, never the way their waits end. */
#define ASKED_BACKSTOP_NS (10LL * 1000 * 1000)

static void *poller_main(void *arg);

static cfd_lane *active; /* lanes with waits, doubly linked via lprev/lnext; g.mu */
static cfd_lane *resume; /* a round whose snapshot was full ends here: the next one starts here (g.mu) */
static int nspin;        /* spin lanes among them */
static bool sync_wake;   /* the syncfd pollfd woke the poller: ask every syncfd head (g.mu) */

static void list_add(cfd_lane *l)
{
    l->lprev = NULL;
    l->lnext = active;
    if (active)
        active->lprev = l;
    active = l;
}

static void list_del(cfd_lane *l)
{
    if (resume == l)
        resume = l->lnext;
    if (l->lprev)
        l->lprev->lnext = l->lnext;
    else
        active = l->lnext;
    if (l->lnext)
        l->lnext->lprev = l->lprev;
    l->lprev = l->lnext = NULL;
}

int64_t cfd_poll_interval(int64_t age, int64_t budget)
{
    int64_t iv = age / POLL_RATIO;
    int64_t floor = budget / POLL_FLOOR_DIV;
    if (iv < floor)
        iv = floor;
    return iv < budget ? iv : budget;
}

/* Set the sleeping poller's timer to fire at `at` (CLOCK_MONOTONIC ns; a
 * time past fires at once, INT64_MAX never). g.mu held, poller running. */
static void arm_poller(int64_t at)
{
    struct itimerspec its = {{0, 0}, {0, 0}};
    if (at != INT64_MAX) {
        if (at < 1)
            at = 1; /* all zero would disarm it */
        its.it_value.tv_sec = (time_t)(at / 1000000000);
        its.it_value.tv_nsec = (long)(at % 1000000000);
    }
    timerfd_settime(g.poller_tfd, TFD_TIMER_ABSTIME, &its, NULL);
    g.poller_wake_at = at;
}

void cfd_wake_poller(void)
{
    if (g.poller_sleeping && g.poller_wake_at > 1)
        arm_poller(0);
}

/* Sleep until the timer fires (`at`, or earlier if a watcher moves it).
 * g.mu held, released meanwhile. */
static void poller_sleep(int64_t at)
{
    g.poller_sleeping = true;
    arm_poller(at);
    int fd = g.poller_tfd;
    int pfd = cfd_syncfd_pollfd_locked(); /* closed only by this thread (poller_main's exit) */
    pthread_mutex_unlock(&g.mu);
    struct pollfd p[2] = {{.fd = fd, .events = POLLIN, .revents = 0},
                          {.fd = pfd, .events = POLLIN | POLLPRI, .revents = 0}};
    poll(p, pfd >= 0 ? 2 : 1, -1);
    uint64_t ticks;
    ssize_t got = read(fd, &ticks, sizeof ticks); /* clear it (EAGAIN: re-armed meanwhile) */
    (void)got;
    bool woke = pfd >= 0 && (p[1].revents & (POLLIN | POLLPRI));
    if (woke)
        cfd_syncfd_ack(pfd); /* before any head is asked: a later pass wakes it again */
    pthread_mutex_lock(&g.mu);
    sync_wake |= woke;
    g.poller_sleeping = false;
    cfd_count(ST_WAKES, 1);
}

static int open_poller_timer(void)
{
    g.poller_tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    if (g.poller_tfd < 0)
        return cfd_fail(CUDAFD_E_SYS, "timerfd_create: %s", strerror(errno));
    cfd_count(ST_EVENTFDS, 1);
    return CUDAFD_OK;
}

static void close_poller_timer(void)
{
    close(g.poller_tfd);
    g.poller_tfd = -1;
    cfd_count(ST_EVENTFDS, -1);
}

/* How long from now the lane is asked next, its head having become head at l->since. */
static int64_t next_step(const cfd_lane *l, int64_t now)
{
    if (l->mech == CUDAFD_MECH_SPIN)
        return 0;
    if (l->mech == CFD_LANE_ASKED)
        return ASKED_BACKSTOP_NS > l->budget ? ASKED_BACKSTOP_NS : l->budget;
    if (l->mech == CUDAFD_MECH_SYNCFD && !(l->head->sp.rec && cfd_syncfd_known_passed_locked(l->head->sp.rec, l->head->sp.thr))) {
        /* the backstop: host1x wakes the poller otherwise (once its syncpoint
         * passed, a head waits only for its event: the usual schedule) */
        int64_t backstop = cfd_syncfd_backstop_ns();
        return backstop > l->budget ? backstop : l->budget;
    }
    return cfd_poll_interval(now - l->since, l->budget);
}

static void plan(cfd_lane *l, int64_t now)
{
    l->step = next_step(l, now);
    l->next_poll = now + l->step;
}

/* A wait joined a lane that has waits: a budget smaller than the lane's so
 * far (another notifier's, or one lowered since) brings its next ask
 * forward, so that every wait is found within its own max_lateness. */
void cfd_lane_joined(cfd_lane *l, int64_t budget)
{
    if (budget >= l->budget)
        return;
    l->budget = budget;
    if (!l->active)
        return;
    int64_t now = cfd_now_ns();
    int64_t step = next_step(l, now);
    if (now + step < l->next_poll) {
        l->step = step;
        l->next_poll = now + step;
        if (g.poller_sleeping && l->next_poll < g.poller_wake_at)
            arm_poller(l->next_poll);
    }
}

int cfd_lane_activate(cfd_lane *l)
{
    int64_t now = cfd_now_ns();
    l->since = l->head->t0;
    plan(l, now);
    if (!g.poller_running) {
        int rc = open_poller_timer();
        if (rc == CUDAFD_OK && (rc = cfd_start_thread(poller_main, "cudafd-poller")) != CUDAFD_OK)
            close_poller_timer();
        if (rc != CUDAFD_OK)
            return rc;
        g.poller_running = true;
    }
    l->active = true;
    list_add(l);
    if (l->mech == CUDAFD_MECH_SPIN)
        nspin++;
    if (g.poller_sleeping && l->next_poll < g.poller_wake_at)
        arm_poller(l->next_poll);
    return CUDAFD_OK;
}

static void retire_lane(cfd_lane *l)
{
    list_del(l);
    l->active = false;
    if (l->mech == CUDAFD_MECH_SPIN)
        nspin--;
    cfd_lane_free(l);
}

/* With no notifier open every wait is detached, and its result goes nowhere:
 * the poller lets them all go now rather than poll them until the GPU passes
 * them (a 30 s kernel would keep it, and its timerfd, alive that long). The
 * events are destroyed with their records pending, which the driver allows
 * (it frees them once the records complete). The poller's own lanes: g.mu held. */
static void drop_all(void)
{
    while (active) {
        cfd_lane *l = active;
        while (l->head)
            cfd_lane_pop(l, CUDA_ERROR_NOT_READY); /* not known over, as in reap_dropped */
        retire_lane(l);
    }
}

/* A lane's head went (popped, or dropped by reap_dropped) and another took
 * its place: when to ask about the new one. `unreported`: the head went
 * through the driver while host1x had not reported its threshold passed
 * (a fault dropped its signal, or host1x missed it): the syncpoint that did
 * not report that head will not report the next one in time either, so the
 * next head's event is asked at once, as an event lane's is. */
static void plan_new_head(cfd_lane *l, int64_t now, bool unreported)
{
    if (l->mech == CUDAFD_MECH_SPIN)
        plan(l, now);
    else if (l->mech == CUDAFD_MECH_SYNCFD && !unreported) /* through host1x first, not the driver */
        l->sync_due = true, plan(l, now);
    else /* it may be over too: ask at once */
        l->next_poll = now, l->step = 0;
}

/* Take the waits their callers let go of (cfd_wait_drop: cancelled, their
 * notifier closed) out of the lanes, so that nothing asks about them until
 * their work ends: a cancelled spin wait would keep the poller spinning, a
 * long kernel's wait would keep it waking, and a caller that closed the
 * notifiers that watched in a context may destroy it. Their events go with
 * their records still pending, which the driver allows. Run at the start of
 * a round, when no head is being asked about unlocked. The poller's own
 * lanes: g.mu held. */
static void reap_dropped(int64_t now)
{
    g.reap_due = false;
    cfd_lane *next;
    for (cfd_lane *l = active; l; l = next) {
        next = l->lnext;
        cfd_wait *prev = NULL, *w = l->head;
        bool new_head = false;
        while (w) {
            cfd_wait *after = w->next;
            if (w->dropped) {
                if (prev)
                    prev->next = after;
                else
                    l->head = after, new_head = true;
                if (l->tail == w)
                    l->tail = prev;
                cfd_wait_complete(w, CUDA_ERROR_NOT_READY, w->over, false); /* not known over: its event is destroyed */
            } else {
                prev = w;
            }
            w = after;
        }
        if (!l->head) {
            retire_lane(l);
        } else if (new_head) {
            l->since = now;
            plan_new_head(l, now, false);
        }
    }
    pthread_cond_broadcast(&g.poller_gone_cv);
}

/* The lane after l in the active list, round from its end to its start;
 * NULL once that is `first`, where the round began. */
static cfd_lane *round_next(cfd_lane *l, cfd_lane *first)
{
    l = l->lnext ? l->lnext : active;
    return l == first ? NULL : l;
}

struct snap {
    cfd_lane *lane;
    CUevent ev;
    CUcontext ctx;
    CUresult r;
    bool sync;        /* a syncfd head asked through host1x, not the driver */
    bool passed;      /* sync: its syncpoint passed (known from the record, or checked) */
    uint32_t id, thr; /* sync: the point */
};

static void *poller_main(void *arg)
{
    static struct snap snap[SNAP_MAX]; /* one poller at a time */
    CUcontext current = NULL;
    prctl(PR_SET_TIMERSLACK, 1UL); /* timed wakes come when asked, not up to 50 us later */
    pthread_mutex_lock(&g.mu);
    for (;;) {
        if (g.nopen == 0 && active) /* every wait is detached: nobody will ask about them */
            drop_all();
        int64_t now = cfd_now_ns();
        if (g.reap_due)
            reap_dropped(now);
        int k = 0;
        int64_t next = INT64_MAX;
        /* Every lane, from where the last full snapshot stopped round to it, so
         * that lanes due at every round (spin) cannot keep the others out. */
        cfd_lane *first = resume ? resume : active;
        resume = NULL;
        for (cfd_lane *l = first; l; l = round_next(l, first)) {
            if (sync_wake && l->mech == CUDAFD_MECH_SYNCFD)
                l->sync_due = true;
            bool due = l->sync_due || l->next_poll - l->step * COALESCE_PCT / 100 <= now;
            if (due && k == SNAP_MAX) { /* the snapshot is full: the next round starts here */
                if (!resume)
                    resume = l;
            } else if (l->sync_due) {
                cfd_wait *h = l->head;
                snap[k++] = (struct snap){l, h->ev, h->cx->ctx, 0, true,
                                          cfd_syncfd_known_passed_locked(h->sp.rec, h->sp.thr), h->sp.id, h->sp.thr};
                l->sync_due = false;
            } else if (due) {
                snap[k++] = (struct snap){l, l->head->ev, l->head->cx->ctx, 0, false, false, 0, 0};
            } else if (l->next_poll < next) {
                next = l->next_poll;
            }
        }
        sync_wake = false;
        if (k == 0) {
            if (!active && g.nopen == 0)
                break;
            poller_sleep(next);
            continue;
        }
        pthread_mutex_unlock(&g.mu);
        int queries = 0;
        for (int i = 0; i < k; i++) {
            if (snap[i].sync && !snap[i].passed && cfd_syncfd_check(snap[i].id, snap[i].thr) != 1)
                continue; /* not yet (or host1x cannot tell: the backstop will) */
            if (snap[i].ctx != current && cu.cuCtxSetCurrent(snap[i].ctx) == CUDA_SUCCESS)
                current = snap[i].ctx;
            snap[i].r = cu.cuEventQuery(snap[i].ev);
            queries++;
            if (snap[i].sync) /* passed: done once its event, behind the signal, reads done too */
                snap[i].passed = true;
        }
        cfd_count(ST_QUERIES, queries);
        pthread_mutex_lock(&g.mu);
        now = cfd_now_ns();
        for (int i = 0; i < k; i++) {
            cfd_lane *l = snap[i].lane;
            if (snap[i].sync) {
                if (!snap[i].passed)
                    continue; /* the pollfd wakes it, or the backstop's query finds it */
                cfd_syncfd_note_passed_locked(l->head->sp.rec, snap[i].thr);
                if (snap[i].r == CUDA_ERROR_NOT_READY) {
                    /* the event recorded behind the signal is a moment late: the
                     * stream is not idle yet, so neither is the wait. Asked again
                     * on the usual schedule, through the driver (plan). */
                    plan(l, now);
                    continue;
                }
            } else if (snap[i].r == CUDA_ERROR_NOT_READY) {
                plan(l, now);
                continue;
            }
            cfd_wait *h = l->head;
            bool unreported = l->mech == CUDAFD_MECH_SYNCFD &&
                              !(h->sp.rec && cfd_syncfd_known_passed_locked(h->sp.rec, h->sp.thr));
            cfd_lane_pop(l, snap[i].r); /* the next head's age counts from now */
            if (!l->head)
                retire_lane(l);
            else
                plan_new_head(l, now, unreported);
        }
        if (nspin > 0) { /* spinning: no sleep, but let watchers take the lock */
            pthread_mutex_unlock(&g.mu);
            for (int i = 0; i < SPIN_RELAX; i++)
                cfd_cpu_relax();
            pthread_mutex_lock(&g.mu);
        }
    }
    g.poller_running = false;
    pthread_cond_broadcast(&g.poller_gone_cv);
    close_poller_timer();
    cfd_syncfd_close_pollfd_locked();
    cfd_thread_exit_locked();
    pthread_mutex_unlock(&g.mu);
    return arg;
}
