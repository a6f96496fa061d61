/*
 * waiters.c - the shared native waiters of the event and spin mechanisms.
 *
 * One poller thread queries the head event of every lane that became active
 * recently. Queries are cheap (no system call on a real GPU), so a short wait
 * is found within microseconds by a thread that is already awake: no thread
 * has to be woken on the critical path of a short wait. After the poller's
 * last completion it stays awake for a linger window (CUDAFD_OPT_LINGER_NS),
 * so back-to-back short waits keep finding it awake; then it sleeps on a
 * condition variable and costs nothing.
 *
 * A lane whose head is still pending after the spin budget (event mechanism
 * only; the spin mechanism never gives up) moves to the slow list, where the
 * poller paces it. If the stream has a history (its last few waits, keyed
 * by stream: pace_predict), the poller sleeps until just before the head
 * should finish, then spins briefly (PACE_SPIN_NS); past that, queries come
 * at growing intervals, never more than an eighth of the time waited. The
 * budget adapts between 5 us and CUDAFD_OPT_SPIN_NS, counted from the
 * poller's first look at the wait (its own wake-up is not spinning): it
 * halves after a pass in which waits outlasted it and grows (by half, and
 * to at least twice the longest spin that paid) after a pass that found
 * waits done. Spinning is paid per poller, not per lane: while the poller
 * keeps finding waits done (many busy streams), no lane gives up, since one
 * more query per sweep costs less than a wake.
 *
 * Why pacing (measured on an H200, bench/results/2026-11-30-h200*): a thread
 * asleep in cuEventSynchronize on a blocking-sync event used 137-168 us of
 * CPU per 2 ms wait and returned ~190 us after the kernel ended; a timed
 * sleep costs one wake (~17-25 us), and a paced wait found ~94 us after.
 *
 * Predictions use the shortest of the stream's last few waits: a stream
 * whose waits vary is queried early, then at growing intervals (a notice
 * comes at most ~12% of the wait late), never as late as its longest wait;
 * and some waits are also asked halfway (pace_next), so a stream whose
 * waits got shorter is learnt in a few waits. (Predicting from the last
 * wait alone was late: on the H200 the demo's mixed 10 us - 3 ms kernels
 * were noticed 2.8 ms after they ended, at the median.)
 *
 * Only a wait still pending after CUDAFD_OPT_BLOCK_AFTER_NS (50 ms) is
 * offered to a pool of blocking waiters, capped at CUDAFD_OPT_MAX_THREADS,
 * which sleep in cuEventSynchronize on a blocking-sync event bridged from
 * the wait's own (sleep_on): for waits that long, their cost is noise.
 * Until one takes the lane, and for lanes beyond the cap, the poller keeps
 * pacing it; nothing can hang.
 *
 * Long waits skip the spin: once the budget sits at its floor (waits keep
 * outlasting it), a new lane is paced at once (stat "direct"), and the poller
 * is woken only if it would otherwise sleep past the lane's first query.
 * Every 16th such lane is a probe that spins for the whole
 * CUDAFD_OPT_SPIN_NS, so the budget grows back when waits get short again.
 *
 * Ownership: a lane in the spin or slow list is owned by the poller, which
 * alone pops its head; a blocker takes a slow lane (state BLOCKED) only when
 * the poller is not holding a snapshot of it (l->polling). A lane's waits are
 * therefore completed by exactly one thread, in order.
 *
 * Fact relied on (measured on an H200, bench/fault_probe.py): after a fault,
 * cuEventQuery on any event of the context reports the error within ~150 ms,
 * but a cuEventSynchronize already blocked on a blocking-sync event returns
 * only when that event's own stream drains, seconds later if a long kernel
 * runs there. So while blocking waiters hold lanes, the poller queries their
 * head events every HEALTH_NS; a sticky error found there is reported at once
 * to every wait of the context (cfd_note_fault), and the blocked threads are
 * left to return in their own time.
 *
 * Threads exit once no notifier is open and they have nothing left to wait
 * for; detached waits still in flight keep them until the GPU passes them.
 */
#include <errno.h>
#include <string.h>
#include <time.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

#include "internal.h"

#define SNAP_MAX 512
#define SPIN_FLOOR_NS (5 * 1000)
#define HEALTH_NS (20 * 1000 * 1000)
#define INNER_NS (20 * 1000) /* longest unlocked query round */
#define PACE_MIN_NS (20 * 1000)     /* the shortest sleep between paced queries */
#define PACE_EARLY_NS (10 * 1000)   /* wake this much before the predicted end (and how late wakes come) */
#define PACE_SPIN_NS (50 * 1000)    /* then spin at most this long */
#define PACE_SLOTS 256              /* the history of how long streams' waits took */
#define WAKE_LATE_MAX_NS (500 * 1000) /* a later wake is an outlier, not how this machine wakes */

static void *poller_main(void *arg);
static void *blocker_main(void *arg);

static void list_add(cfd_lane **list, cfd_lane *l)
{
    l->lprev = NULL;
    l->lnext = *list;
    if (*list)
        (*list)->lprev = l;
    *list = l;
}

static void list_del(cfd_lane **list, cfd_lane *l)
{
    if (l->lprev)
        l->lprev->lnext = l->lnext;
    else
        *list = l->lnext;
    if (l->lnext)
        l->lnext->lprev = l->lprev;
    l->lprev = l->lnext = NULL;
}


static void enter_slow(cfd_lane *l, int64_t now);

static void wake_poller_if_untimed(void)
{
    if (g.poller_sleeping && !g.poller_timed)
        pthread_cond_signal(&g.poller_cv);
}

/* Waits have been outlasting the shortest spin budget: pace this lane at
 * once. The poller is woken only if it would sleep past the lane's first
 * query (one thread wake less per long wait otherwise). Every 16th lane
 * spins instead, as the probe that notices when waits got short. */
static bool activate_direct(cfd_lane *l)
{
    if (l->mech != CUDAFD_MECH_EVENT || !g.poller_running || g.spin_budget < 0 || g.spin_budget > SPIN_FLOOR_NS)
        return false;
    if ((++g.direct_probe & 15) == 0) {
        l->probe = true;
        return false;
    }
    enter_slow(l, cfd_now_ns());
    if (g.poller_sleeping && (!g.poller_timed || l->next_poll < g.poller_wake_at))
        pthread_cond_signal(&g.poller_cv);
    cfd_count(ST_DIRECT, 1);
    return true;
}

int cfd_lane_activate(cfd_lane *l)
{
    atomic_fetch_add_explicit(&g.activity, 1, memory_order_release);
    l->probe = false;
    if (activate_direct(l))
        return CUDAFD_OK;
    l->looked = false;
    l->state = LANE_SPIN;
    list_add(&g.spin_list, l);
    atomic_fetch_add(&g.nspin, 1);
    if (!g.poller_running) {
        int rc = cfd_start_thread(poller_main, "cudafd-poller");
        if (rc != CUDAFD_OK) {
            list_del(&g.spin_list, l);
            atomic_fetch_sub(&g.nspin, 1);
            l->state = 0;
            return rc;
        }
        g.poller_running = true;
    } else if (g.poller_sleeping) {
        pthread_cond_signal(&g.poller_cv);
    }
    return CUDAFD_OK;
}

/* Offer a slow lane to the blocking waiters, starting one if none is idle. */
static bool offer_to_blockers(cfd_lane *l)
{
    if (l->queued)
        return true;
    l->queued = true;
    l->qnext = NULL;
    if (g.bq_tail)
        g.bq_tail->qnext = l;
    else
        g.bq_head = l;
    g.bq_tail = l;
    if (g.idle_blockers > 0) {
        pthread_cond_signal(&g.blocker_cv);
        return true;
    }
    if (g.nblockers < g.max_threads && cfd_start_thread(blocker_main, "cudafd-blocker") == CUDAFD_OK) {
        g.nblockers++;
        return true;
    }
    return false; /* the poller keeps pacing it until a blocker is free */
}

/* Leave the poller's lists; free the lane if nothing else refers to it. */
static void retire_lane(cfd_lane *l)
{
    if (l->state == LANE_SPIN) {
        list_del(&g.spin_list, l);
        atomic_fetch_sub(&g.nspin, 1);
    } else {
        list_del(&g.slow_list, l);
    }
    l->state = 0;
    if (!l->queued)
        cfd_lane_free(l);
}

/* ---- pacing ---- */

/* How long each stream's last PACE_KEEP waits took, from becoming their
 * lane's head to being found (direct-mapped by stream; a collision only
 * costs a guess). */
#define PACE_KEEP 4
#define PACE_PROBE_EVERY 8 /* waits between halfway probes of a steady stream */
static struct {
    CUcontext ctx;
    uintptr_t stream;
    int64_t ns[PACE_KEEP]; /* 0: unknown */
    unsigned next;
    unsigned since_probe; /* waits since the last halfway probe */
    bool shrinking;       /* the last halfway probe found the wait over: probe again */
} pace_hist[PACE_SLOTS];

static int pace_slot(const cfd_lane *l)
{
    uint64_t h = ((uint64_t)(uintptr_t)l->ctx ^ (uint64_t)l->stream * 0x9e3779b97f4a7c15ull) >> 17;
    int i = (int)(h % PACE_SLOTS);
    if (pace_hist[i].ctx != l->ctx || pace_hist[i].stream != l->stream) {
        memset(&pace_hist[i], 0, sizeof pace_hist[i]);
        pace_hist[i].ctx = l->ctx;
        pace_hist[i].stream = l->stream;
    }
    return i;
}

/* The predicted length of the lane's next wait: the shortest of its
 * stream's last waits (0: none known). The shortest, so that a stream whose
 * waits vary is queried early and then at growing intervals, rather than
 * as late as its longest wait took. */
static int64_t pace_predict(const cfd_lane *l)
{
    int i = pace_slot(l);
    int64_t best = 0;
    for (int k = 0; k < PACE_KEEP; k++) {
        int64_t ns = pace_hist[i].ns[k];
        if (ns > 0 && (best == 0 || ns < best))
            best = ns;
    }
    return best;
}

static void pace_push(const cfd_lane *l, int64_t took)
{
    int i = pace_slot(l);
    pace_hist[i].ns[pace_hist[i].next++ % PACE_KEEP] = took > 0 ? took : 1;
}

/* Plan the query at the predicted end (PACE_EARLY_NS and the usual
 * lateness of a timed wake before it): false if that is past or too far. */
static bool pace_at_end(cfd_lane *l, int64_t now)
{
    int64_t at = l->pred_end - PACE_EARLY_NS - g.wake_late;
    l->predicted = l->pred_end && at > now && at <= now + HEALTH_NS;
    if (l->predicted)
        l->next_poll = at;
    return l->predicted;
}

/* The next paced query of a lane whose head has waited since l->since.
 * `first`: it just became paced. Then, if the stream has a history, the
 * query comes just before the predicted end, except that every
 * PACE_PROBE_EVERY-th wait (every wait while the stream is shrinking) is
 * first asked halfway: a query at the end cannot tell a wait that ended just
 * before it from one that ended long before, so without it a stream whose
 * waits got shorter would keep being noticed as late as they used to take.
 * Otherwise, intervals start at PACE_MIN_NS where there is a prediction (the
 * end is near) or at an eighth of the time waited, double after each miss, and
 * never exceed an eighth of the time waited (so a late notice costs at most
 * ~12% of the wait) nor HEALTH_NS (faults are looked for that often). */
static void pace_next(cfd_lane *l, int64_t now, bool first)
{
    int64_t waited = now - l->since;
    if (first) {
        l->step = 0;
        l->halfway = false;
        int64_t pace = pace_predict(l);
        l->pred_end = pace > 0 ? l->since + pace : 0;
        if (pace > 0) {
            int i = pace_slot(l);
            int64_t half = l->since + pace / 2;
            if ((pace_hist[i].shrinking || ++pace_hist[i].since_probe >= PACE_PROBE_EVERY) &&
                half > now + PACE_MIN_NS && half <= now + HEALTH_NS) {
                pace_hist[i].since_probe = 0;
                l->halfway = true;
                l->predicted = false;
                l->next_poll = half;
                return;
            }
        }
        if (pace_at_end(l, now))
            return;
    } else if (l->halfway) { /* not over halfway: the prediction stands */
        l->halfway = false;
        pace_hist[pace_slot(l)].shrinking = false;
        if (pace_at_end(l, now))
            return;
    }
    int64_t step = l->step ? 2 * l->step : (l->pred_end ? PACE_MIN_NS : waited / 8);
    if (step > waited / 8)
        step = waited / 8;
    l->step = step < PACE_MIN_NS ? PACE_MIN_NS : step > HEALTH_NS ? HEALTH_NS : step;
    l->predicted = false;
    l->next_poll = now + l->step;
}

/* A paced head was found done at `now` by a round of queries that began at
 * `asked`: remember how long it took. Found by spinning, the time is exact.
 * Found at the first query, it ended some time before: at a halfway probe,
 * the wait took at most that long (and the stream is probed again next
 * time, so a shorter pattern is learnt in a few waits); at the predicted
 * end, how late the wake came hides when it ended, so the prediction steps
 * back a little (until a query comes before the end and the spin times
 * it); after an interval, assume it ended midway through it. */
static void pace_learn(cfd_lane *l, int64_t now, int64_t asked, bool first_round)
{
    int64_t took = now - l->since;
    pace_hist[pace_slot(l)].shrinking = first_round && l->halfway;
    if (first_round && l->halfway) { /* over by halfway: at most that long, maybe much less */
        took = asked - l->since;
    } else if (first_round && l->predicted) {
        int64_t pace = l->pred_end - l->since;
        took = pace - (pace / 64 > PACE_EARLY_NS ? pace / 64 : PACE_EARLY_NS);
    } else if (first_round) {
        took -= l->step / 2;
    }
    l->halfway = false;
    pace_push(l, took);
}

/* A lane paced for CUDAFD_OPT_BLOCK_AFTER_NS goes to the blocking waiters
 * too: for waits that long, their cost is noise. */
static bool paced_long(const cfd_lane *l, int64_t now)
{
    return now - l->since >= g.block_after_ns;
}

/* Into the slow list: paced by the poller. */
static void enter_slow(cfd_lane *l, int64_t now)
{
    l->state = LANE_SLOW;
    pace_next(l, now, true);
    list_add(&g.slow_list, l);
    if (paced_long(l, now))
        offer_to_blockers(l);
}

static void to_slow(cfd_lane *l, int64_t now)
{
    list_del(&g.spin_list, l);
    atomic_fetch_sub(&g.nspin, 1);
    enter_slow(l, now);
}

static void to_spin(cfd_lane *l, int64_t now)
{
    list_del(&g.slow_list, l);
    l->state = LANE_SPIN;
    l->since = now;
    l->looked = false;
    list_add(&g.spin_list, l);
    atomic_fetch_add(&g.nspin, 1);
}

struct snap {
    cfd_lane *lane;
    CUevent ev;
    CUcontext ctx;
    CUresult r;
};

/* Query the head event of every lane a blocking waiter holds, for faults. */
static void check_health(void)
{
    static struct snap probe[SNAP_MAX];
    static cfd_ctx *owner[SNAP_MAX];
    int k = 0;
    for (cfd_lane *l = g.blocked_list; l && k < SNAP_MAX; l = l->lnext)
        if (l->head && !l->head->cx->fault) {
            owner[k] = l->head->cx;
            probe[k++] = (struct snap){l, l->head->ev, l->head->cx->ctx, 0};
        }
    if (k == 0)
        return;
    cfd_probe_begin(); /* keeps these events and context records alive while unlocked */
    pthread_mutex_unlock(&g.mu);
    for (int i = 0; i < k; i++) {
        cu.cuCtxSetCurrent(probe[i].ctx);
        probe[i].r = cu.cuEventQuery(probe[i].ev);
    }
    pthread_mutex_lock(&g.mu);
    cfd_probe_end();
    for (int i = 0; i < k; i++)
        if (probe[i].r != CUDA_SUCCESS && probe[i].r != CUDA_ERROR_NOT_READY)
            cfd_note_fault(owner[i], probe[i].r);
}

/* The budget after a wait was found `spun` ns into its spin: half again, and
 * at least twice what this one took, within [floor, spin_ns]. */
static int64_t grown(int64_t budget, int64_t spun)
{
    int64_t more = budget < SPIN_FLOOR_NS ? SPIN_FLOOR_NS : budget + budget / 2;
    if (more < 2 * spun)
        more = 2 * spun;
    return more < g.spin_ns ? more : g.spin_ns;
}

static void *poller_main(void *arg)
{
    static struct snap snap[SNAP_MAX]; /* one poller at a time */
    CUcontext current = NULL;
    int64_t last_done = 0;  /* for the linger window; 0 once it has passed */
    int64_t last_found = 0; /* the last pass that found a wait done */
#ifdef PR_SET_TIMERSLACK
    prctl(PR_SET_TIMERSLACK, 1000UL); /* paced wakes: 1 us late at most, not the default 50 */
#endif
    pthread_mutex_lock(&g.mu);
    if (g.spin_budget < 0 || g.spin_budget > g.spin_ns)
        g.spin_budget = g.spin_ns;
    int64_t next_health = 0;
    for (;;) {
        if (g.spin_budget > g.spin_ns)
            g.spin_budget = g.spin_ns;
        int64_t spin_budget = g.spin_budget;
        int64_t now = cfd_now_ns();
        int k = 0;
        int64_t next_slow = INT64_MAX;
        for (cfd_lane *l = g.spin_list; l && k < SNAP_MAX; l = l->lnext) {
            if (!l->looked) { /* the budget counts from here: the poller's own wake-up is not spin */
                l->looked = true;
                l->since = now;
            }
            snap[k++] = (struct snap){l, l->head->ev, l->head->cx->ctx, 0};
        }
        bool pace_spin = false; /* a predicted end is due: spin briefly around it */
        for (cfd_lane *l = g.slow_list; l && k < SNAP_MAX; l = l->lnext) {
            if (l->next_poll <= now) {
                pace_spin |= l->predicted;
                snap[k++] = (struct snap){l, l->head->ev, l->head->cx->ctx, 0};
            } else if (l->next_poll < next_slow) {
                next_slow = l->next_poll;
            }
        }
        if (g.blocked_list && now >= next_health) {
            check_health();
            current = NULL; /* it made other contexts current */
            next_health = cfd_now_ns() + HEALTH_NS;
            continue;
        }
        if (g.blocked_list || g.bq_head) { /* blocked lanes, or lanes about to be: a health timer */
            if (next_health <= now)
                next_health = now + HEALTH_NS;
            if (next_health < next_slow)
                next_slow = next_health;
        }
        if (k == 0) {
            if (!g.slow_list && g.nopen == 0)
                break;
            if (now < last_done + g.linger_ns) { /* stay awake for the next short wait */
                int64_t until = last_done + g.linger_ns < next_slow ? last_done + g.linger_ns : next_slow;
                pthread_mutex_unlock(&g.mu);
                while (atomic_load_explicit(&g.nspin, memory_order_relaxed) == 0 && cfd_now_ns() < until)
                    for (int i = 0; i < 32; i++)
                        cfd_cpu_relax();
                pthread_mutex_lock(&g.mu);
                last_done = 0;
                continue;
            }
            g.poller_sleeping = true;
            g.poller_timed = next_slow - now <= HEALTH_NS;
            g.poller_wake_at = next_slow;
            if (next_slow == INT64_MAX) {
                pthread_cond_wait(&g.poller_cv, &g.mu);
            } else {
                cfd_cond_wait_ns(&g.poller_cv, next_slow - now);
                int64_t late = cfd_now_ns() - next_slow; /* how late timed wakes come here */
                if (late >= 0 && late < WAKE_LATE_MAX_NS)
                    g.wake_late += (late - g.wake_late) / 8;
            }
            g.poller_sleeping = g.poller_timed = false;
            continue;
        }
        int64_t asked = now; /* when this round of queries began */
        for (int i = 0; i < k; i++)
            snap[i].lane->polling = true;
        /* Query the snapshot without the lock, again and again while nothing
         * is done, nothing new was watched and the inner bound has not
         * passed: watch() callers then rarely meet a held lock. */
        int64_t inner = spin_budget < INNER_NS ? spin_budget : INNER_NS;
        int64_t inner_until = now + (pace_spin ? PACE_SPIN_NS : inner);
        unsigned seen = atomic_load_explicit(&g.activity, memory_order_acquire);
        int rounds = 0;
        pthread_mutex_unlock(&g.mu);
        for (;; rounds++) {
            bool any = false;
            for (int i = 0; i < k; i++) {
                if (snap[i].ctx != current && cu.cuCtxSetCurrent(snap[i].ctx) == CUDA_SUCCESS)
                    current = snap[i].ctx;
                snap[i].r = cu.cuEventQuery(snap[i].ev);
                any |= snap[i].r != CUDA_ERROR_NOT_READY;
            }
            if (any || atomic_load_explicit(&g.activity, memory_order_acquire) != seen ||
                cfd_now_ns() >= inner_until)
                break;
            for (int i = 0; i < 32; i++)
                cfd_cpu_relax();
        }
        pthread_mutex_lock(&g.mu);
        now = cfd_now_ns();
        bool progress = false;
        for (int i = 0; i < k && !progress; i++)
            progress = snap[i].r != CUDA_ERROR_NOT_READY;
        if (progress)
            last_found = now;
        bool first_round = rounds == 0; /* found at the first query: it may have ended well before */
        int64_t spun = -1;     /* the longest spin that paid in this pass */
        bool gave_up = false;  /* a lane outlasted the budget in this pass */
        for (int i = 0; i < k; i++) {
            cfd_lane *l = snap[i].lane;
            l->polling = false;
            if (snap[i].r != CUDA_ERROR_NOT_READY) {
                if (l->state == LANE_SPIN) { /* found while spinning: spinning pays here */
                    if (now - l->since > spun)
                        spun = now - l->since;
                    l->probe = false;
                } else {
                    if (snap[i].r == CUDA_SUCCESS)
                        pace_learn(l, now, asked, first_round);
                    cfd_count(ST_PACED, 1);
                }
                cfd_lane_pop(l, snap[i].r);
                cfd_count(ST_SPUN, 1);
                if (!l->head)
                    retire_lane(l);
                else if (l->state == LANE_SLOW)
                    to_spin(l, now); /* its next waits are likely done too */
            } else if (l->state == LANE_SPIN) {
                /* Spinning is paid per poller, not per lane: a lane gives up only
                 * when it and the poller both went a budget without a completion. */
                int64_t idle_since = l->since > last_found ? l->since : last_found;
                if (l->mech == CUDAFD_MECH_EVENT && now - idle_since > (l->probe ? g.spin_ns : spin_budget)) {
                    l->probe = false;
                    to_slow(l, now);
                    gave_up = true;
                }
            } else {
                pace_next(l, now, false);
                if (paced_long(l, now))
                    offer_to_blockers(l); /* no-op if still queued */
            }
        }
        if (spun >= 0)
            g.spin_budget = grown(spin_budget, spun);
        else if (gave_up)
            g.spin_budget = spin_budget / 2 > SPIN_FLOOR_NS ? spin_budget / 2 : SPIN_FLOOR_NS;
        if (spun >= 0) /* linger only for short waits: after a paced one it would be pure cost */
            last_done = now;
    }
    g.poller_running = false;
    cfd_thread_exit_locked();
    pthread_mutex_unlock(&g.mu);
    return arg;
}

/* Sleep until `ev` completes; cx->ctx current, g.mu not held. Pool events
 * are plain (contexts.c says why), and cuEventSynchronize spins on those: a
 * side stream waits for `ev` and records a blocking-sync event of this
 * thread's, which it sleeps on. One such record per blocked lane is far from
 * the driver's limit of pending ones. If the bridge cannot be set up, the
 * plain (spinning) synchronize still gives the right answer. */
static CUresult sleep_on(cfd_ctx *cx, CUevent ev)
{
    CUstream side = NULL;
    int index = -1;
    CUevent bridge = NULL;
    bool ok = cfd_side_stream(&cx->bridge, (uintptr_t)ev, &side, &index) == CUDAFD_OK &&
              cfd_event_create(&bridge, true) == CUDAFD_OK && cu.cuStreamWaitEvent(side, ev, 0) == CUDA_SUCCESS &&
              cu.cuEventRecord(bridge, side) == CUDA_SUCCESS;
    CUresult r = ok ? cu.cuEventSynchronize(bridge) : cu.cuEventSynchronize(ev);
    if (ok && r == CUDA_SUCCESS)
        r = cu.cuEventQuery(ev); /* the answer for ev itself */
    if (bridge)
        cfd_event_destroy(bridge); /* released by the driver once its record completes */
    if (index >= 0) {
        pthread_mutex_lock(&g.mu);
        cfd_side_release(&cx->bridge, (uintptr_t)ev, index);
        pthread_mutex_unlock(&g.mu);
    }
    return r;
}

/* The first queued lane a blocker may take; stale entries are dropped. */
static cfd_lane *take_queued(void)
{
    cfd_lane **link = &g.bq_head, *prev = NULL;
    while (*link) {
        cfd_lane *l = *link;
        if (l->state == LANE_SLOW && l->polling) { /* the poller holds it: skip for now */
            prev = l;
            link = &l->qnext;
            continue;
        }
        *link = l->qnext;
        if (g.bq_tail == l)
            g.bq_tail = prev;
        l->queued = false;
        if (l->state == LANE_SLOW)
            return l;
        if (!l->state && !l->head)
            cfd_lane_free(l); /* emptied while queued */
    }
    return NULL;
}

static void *blocker_main(void *arg)
{
    CUcontext current = NULL;
    pthread_mutex_lock(&g.mu);
    for (;;) {
        cfd_lane *l = take_queued();
        if (!l) {
            if (g.nopen == 0 && !g.bq_head && !g.slow_list)
                break;
            g.idle_blockers++;
            if (g.bq_head) /* only lanes the poller holds now: look again soon */
                cfd_cond_wait_ns(&g.blocker_cv, 100 * 1000);
            else
                pthread_cond_wait(&g.blocker_cv, &g.mu);
            g.idle_blockers--;
            continue;
        }
        list_del(&g.slow_list, l);
        l->state = LANE_BLOCKED;
        list_add(&g.blocked_list, l);
        wake_poller_if_untimed(); /* it checks blocked lanes for faults on a timer */
        bool block = true;
        while (l->head) {
            CUevent ev = l->head->ev;
            cfd_ctx *cx = l->head->cx;
            pthread_mutex_unlock(&g.mu);
            if (cx->ctx != current && cu.cuCtxSetCurrent(cx->ctx) == CUDA_SUCCESS)
                current = cx->ctx;
            CUresult r = block ? sleep_on(cx, ev) : cu.cuEventQuery(ev);
            pthread_mutex_lock(&g.mu);
            if (r == CUDA_ERROR_NOT_READY) {
                block = true;
                continue;
            }
            if (block && r == CUDA_SUCCESS)
                pace_push(l, cfd_now_ns() - l->since); /* a late bound, stepped back by later paced waits */
            cfd_lane_pop(l, r);
            cfd_count(ST_BLOCKED, 1);
            block = false; /* the following waits are often done already */
        }
        list_del(&g.blocked_list, l);
        l->state = 0;
        if (!l->queued)
            cfd_lane_free(l);
    }
    g.nblockers--;
    cfd_thread_exit_locked();
    pthread_mutex_unlock(&g.mu);
    return arg;
}
