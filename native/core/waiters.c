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
 * poller paces it: it sleeps until the time pacing.c plans from the
 * stream's history, just before the head should finish, then spins briefly
 * (CFD_PACE_SPIN_NS); past that, queries come at growing intervals, and a
 * lane backing off joins any pass within a quarter of its interval of its
 * time, so that many such lanes share wakes (on an H200, 10,000 waits on
 * 1,000 gated streams: 0.20 wakes per watch instead of 0.85). The
 * budget adapts between 5 us and CUDAFD_OPT_SPIN_NS, counted from the
 * poller's first look at the wait (its own wake-up is not spinning): it
 * halves after a pass in which waits outlasted it and grows (by half, and
 * to at least twice the longest spin that paid) after a pass that found
 * waits done. Spinning is paid per poller, not per lane: while the poller
 * keeps finding waits done (many busy streams), no lane gives up, since one
 * more query per sweep costs less than a wake. Lanes paced for
 * CUDAFD_OPT_BLOCK_AFTER_NS are offered to the blocking waiters (blockers.c).
 *
 * Long waits skip the spin: once the budget sits at its floor (waits keep
 * outlasting it), a new lane is paced at once (stat "direct"), and the poller
 * is not woken: the watching thread moves its timer earlier if it would
 * otherwise sleep past the lane's first query.
 * Every 16th such lane is a probe that spins for the whole
 * CUDAFD_OPT_SPIN_NS, so the budget grows back when waits get short again.
 *
 * The poller sleeps in poll(2) on a timerfd, not on a condition variable,
 * so that a thread handing it a paced lane can set when it wakes without
 * waking it: a 2 ms wait then costs it one wake, not two (on an H200 each
 * wake of a sleeping thread costs ~15-50 us of CPU). Waking it at once is
 * arming that timer in the past.
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
 * head events every CFD_HEALTH_NS; a sticky error found there is reported at once
 * to every wait of the context (cfd_note_fault), and the blocked threads are
 * left to return in their own time.
 *
 * Threads exit once no notifier is open and they have nothing left to wait
 * for; detached waits still in flight keep them until the GPU passes them.
 */
#include <errno.h>
#include <poll.h>
#include <string.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

#include "internal.h"

#define SNAP_MAX 512
#define SPIN_FLOOR_NS (5 * 1000)
#define INNER_NS (20 * 1000) /* longest unlocked query round */
#define WAKE_LATE_MAX_NS (500 * 1000) /* a later wake is an outlier, not how this machine wakes */
#ifndef COALESCE_DIV
#define COALESCE_DIV 4 /* a backing-off lane may be asked this fraction of its step early */
#endif

static void *poller_main(void *arg);

void cfd_list_add(cfd_lane **list, cfd_lane *l)
{
    l->lprev = NULL;
    l->lnext = *list;
    if (*list)
        (*list)->lprev = l;
    *list = l;
}

void cfd_list_del(cfd_lane **list, cfd_lane *l)
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

/* Set the sleeping poller's timer to fire at `at` (CLOCK_MONOTONIC ns;
 * a time past fires at once, INT64_MAX never). g.mu held, poller running. */
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
    g.poller_wake_at = at <= 1 ? 0 : at;
}

/* Have the sleeping poller wake by `at` at the latest (now if `at` is 0):
 * its timer moves earlier, and nothing wakes it before. */
void cfd_poller_due_by(int64_t at)
{
    if (g.poller_sleeping && at < g.poller_wake_at) {
        arm_poller(at);
        g.poller_timed = true;
    }
}

void cfd_wake_poller(void) { cfd_poller_due_by(0); }

void cfd_wake_poller_if_untimed(void)
{
    if (g.poller_sleeping && !g.poller_timed)
        cfd_wake_poller();
}

/* The poller's sleep until its timer fires (`at`; INT64_MAX: until someone
 * arms it). g.mu held, released meanwhile. Returns how late the timer
 * fired, or -1 if it was made to fire at once. */
static int64_t poller_sleep(int64_t at)
{
    g.poller_sleeping = true;
    g.poller_timed = at - cfd_now_ns() <= CFD_HEALTH_NS;
    arm_poller(at);
    int fd = g.poller_tfd;
    pthread_mutex_unlock(&g.mu);
    struct pollfd p = {.fd = fd, .events = POLLIN, .revents = 0};
    poll(&p, 1, -1);
    uint64_t ticks;
    ssize_t got = read(fd, &ticks, sizeof ticks); /* clear it (EAGAIN: someone re-armed it meanwhile) */
    (void)got;
    int64_t woke = cfd_now_ns();
    pthread_mutex_lock(&g.mu);
    int64_t due = g.poller_wake_at;
    g.poller_sleeping = g.poller_timed = false;
    cfd_count(ST_WAKES, 1);
    return due > 0 && due != INT64_MAX ? woke - due : -1;
}

/* The poller's timer: made before its thread starts, closed as it exits (g.mu held). */
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

/* Waits have been outlasting the shortest spin budget: pace this lane at
 * once. The poller is not woken, only its timer moved earlier if it would
 * sleep past the lane's first query. Every 16th lane
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
    cfd_poller_due_by(l->next_poll);
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
    cfd_list_add(&g.spin_list, l);
    atomic_fetch_add(&g.nspin, 1);
    if (!g.poller_running) {
        int rc = open_poller_timer();
        if (rc == CUDAFD_OK && (rc = cfd_start_thread(poller_main, "cudafd-poller")) != CUDAFD_OK)
            close_poller_timer();
        if (rc != CUDAFD_OK) {
            cfd_list_del(&g.spin_list, l);
            atomic_fetch_sub(&g.nspin, 1);
            l->state = 0;
            return rc;
        }
        g.poller_running = true;
    } else {
        cfd_wake_poller();
    }
    return CUDAFD_OK;
}

/* Leave the poller's lists; free the lane if nothing else refers to it. */
static void retire_lane(cfd_lane *l)
{
    if (l->state == LANE_SPIN) {
        cfd_list_del(&g.spin_list, l);
        atomic_fetch_sub(&g.nspin, 1);
    } else {
        cfd_list_del(&g.slow_list, l);
    }
    l->state = 0;
    if (!l->queued)
        cfd_lane_free(l);
}

/* Into the slow list: paced by the poller. */
static void enter_slow(cfd_lane *l, int64_t now)
{
    l->state = LANE_SLOW;
    cfd_pace_first(l, now);
    cfd_list_add(&g.slow_list, l);
    if (cfd_paced_long(l, now))
        cfd_offer_to_blockers(l);
}

static void to_slow(cfd_lane *l, int64_t now)
{
    cfd_list_del(&g.spin_list, l);
    atomic_fetch_sub(&g.nspin, 1);
    enter_slow(l, now);
}

static void to_spin(cfd_lane *l, int64_t now)
{
    cfd_list_del(&g.slow_list, l);
    l->state = LANE_SPIN;
    l->since = now;
    l->looked = false;
    cfd_list_add(&g.spin_list, l);
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
            /* A lane backing off joins this pass up to a quarter step early:
             * lanes due at nearby times share one wake (COALESCE_DIV). */
            int64_t early = l->predicted || l->halfway ? 0 : l->step / COALESCE_DIV;
            if (l->next_poll - early <= now) {
                pace_spin |= l->predicted;
                snap[k++] = (struct snap){l, l->head->ev, l->head->cx->ctx, 0};
            } else if (l->next_poll < next_slow) {
                next_slow = l->next_poll;
            }
        }
        if (g.caller_list) { /* waits their callers time: taken back if a caller went away */
            bool released;
            int64_t overdue = cfd_caller_overdue(now, &released);
            if (released)
                continue; /* they are in the lists now: look again */
            if (overdue < next_slow)
                next_slow = overdue;
        }
        if (g.blocked_list && now >= next_health) {
            check_health();
            current = NULL; /* it made other contexts current */
            next_health = cfd_now_ns() + CFD_HEALTH_NS;
            continue;
        }
        if (g.blocked_list || g.bq_head) { /* blocked lanes, or lanes about to be: a health timer */
            if (next_health <= now)
                next_health = now + CFD_HEALTH_NS;
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
            int64_t late = poller_sleep(next_slow); /* how late timed wakes come here */
            if (late >= 0 && late < WAKE_LATE_MAX_NS)
                g.wake_late += (late - g.wake_late) / 8;
            continue;
        }
        int64_t asked = now; /* when this round of queries began */
        for (int i = 0; i < k; i++)
            snap[i].lane->polling = true;
        /* Query the snapshot without the lock, again and again while nothing
         * is done, nothing new was watched and the inner bound has not
         * passed: watch() callers then rarely meet a held lock. */
        int64_t inner = spin_budget < INNER_NS ? spin_budget : INNER_NS;
        int64_t inner_until = now + (pace_spin ? CFD_PACE_SPIN_NS : inner);
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
                        cfd_pace_found(l, now, asked, first_round);
                    cfd_count(ST_PACED, 1);
                }
                cfd_count(ST_SPUN, 1); /* before the pop, which may push it: see deliver() */
                cfd_lane_pop(l, snap[i].r);
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
                cfd_pace_missed(l, now);
                if (cfd_paced_long(l, now))
                    cfd_offer_to_blockers(l); /* no-op if still queued */
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
    close_poller_timer();
    cfd_thread_exit_locked();
    pthread_mutex_unlock(&g.mu);
    return arg;
}

