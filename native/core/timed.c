/*
 * timed.c - waits whose caller does the poller's timing: cudafd_watch_stream_timed
 * and cudafd_check.
 *
 * A long wait paced by the poller costs its thread a wake (and a short spin)
 * on top of the caller's own wake: on an H200 ~50-60 us of CPU per 2 ms
 * wait, a third of the process's (bench/results/2026-11-30-h200-bounds). An
 * event loop that can sleep on a precise timer of its own can do the timing
 * instead: the watch returns when to ask (pace_caller.c, from the stream's
 * history), the caller asks cudafd_check then, and learns the status right
 * there, with no thread of ours woken and no completion queued. With
 * cudafd_set_clock the core arms the caller's timerfd for each such time
 * and disarms it when a check ends the wait (or arms it idle_ns later, so
 * the caller learns that no wait followed for that long).
 *
 * Such a lane (state LANE_CALLER, in g.caller_list) holds one wait and is
 * owned by the caller's check, which alone pops it; its query runs unlocked
 * with l->polling set, as the poller's do, and the flag stays set until the
 * check is done with the lane. Whenever that cannot hold, the
 * lane goes back to the poller (cfd_caller_release) and the wait is reported
 * through the fd like any other: when a second wait joins the lane (order
 * is the lane's), when the wait is detached (cancel, close, a fault swept
 * its context), or when the check finds it so. A release asked for while a
 * check queries unlocked is done by that check (l->hand_back).
 *
 * Only the event mechanism, and only streams with a history (the first wait
 * on a stream is paced by the poller, which learns its length). A caller
 * that stops checking should cancel the token or close the notifier, which
 * hand the lane back at once; one that just stops (a bug, a loop blocked for
 * long) loses the wait to the poller CALLER_GRACE_NS after its due time, and
 * the fd reports it: a wait is never stranded. The poller's timer covers
 * that (one wake a second at most, while callers time waits).
 */
#include <errno.h>
#include <string.h>
#include <sys/timerfd.h>

#include "internal.h"

#define CALLER_GRACE_NS (1000 * 1000 * 1000LL)

/* Arm the caller's timerfd for `at` (CLOCK_MONOTONIC ns), or disarm it
 * (at <= 0), which also clears its readiness. */
static bool clock_arm(int fd, int64_t at)
{
    struct itimerspec t = {0};
    if (at > 0) {
        t.it_value.tv_sec = at / 1000000000;
        t.it_value.tv_nsec = at % 1000000000;
    }
    return timerfd_settime(fd, at > 0 ? TFD_TIMER_ABSTIME : 0, &t, NULL) == 0;
}

bool cfd_caller_take(cfd_lane *l, int64_t now, int clock)
{
    if (l->mech != CUDAFD_MECH_EVENT || !cfd_pace_known(l))
        return false;
    cfd_caller_plan(l, now);
    if (clock >= 0 && !clock_arm(clock, l->next_poll))
        return false; /* the poller times it: the wait is never left without a timer */
    l->state = LANE_CALLER;
    l->hand_back = false;
    cfd_list_add(&g.caller_list, l);
    cfd_poller_due_by(l->next_poll + CALLER_GRACE_NS);
    cfd_count(ST_DIRECT, 1);
    return true;
}

int64_t cfd_caller_overdue(int64_t now, bool *released)
{
    int64_t next = INT64_MAX;
    cfd_lane *lnext;
    *released = false;
    for (cfd_lane *l = g.caller_list; l; l = lnext) {
        lnext = l->lnext;
        int64_t late_at = l->next_poll + CALLER_GRACE_NS;
        if (late_at <= now && !l->polling) {
            cfd_caller_release(l);
            *released = true;
        } else if (late_at < next) {
            next = late_at;
        }
    }
    return next;
}

int cfd_caller_release(cfd_lane *l)
{
    if (l->state != LANE_CALLER)
        return CUDAFD_OK;
    if (l->polling) { /* a check is querying it unlocked: it hands the lane back itself */
        l->hand_back = true;
        return CUDAFD_OK;
    }
    cfd_list_del(&g.caller_list, l);
    l->state = 0;
    l->hand_back = false;
    if (!l->head) {
        if (!l->queued)
            cfd_lane_free(l);
        return CUDAFD_OK;
    }
    return cfd_lane_activate(l);
}

void cfd_caller_release_detached(void)
{
    cfd_lane *next;
    for (cfd_lane *l = g.caller_list; l; l = next) {
        next = l->lnext;
        if (!l->head || !l->head->n)
            cfd_caller_release(l);
    }
}

/* The head of a caller's lane finished with `r` while attached to its
 * notifier: complete it without queueing it (the check returns the status). */
static void complete_quietly(cfd_lane *l, int64_t r)
{
    cfd_wait_detach(l->head);
    cfd_count(ST_COMPLETED, 1);
    cfd_count(ST_TIMED, 1);
    if (r != 0)
        cfd_count(ST_FAULTS, 1);
    cfd_lane_pop(l, r);
}

CFD_API int cudafd_check(cudafd_notifier *n, uint64_t token, int64_t *status, int64_t *due_ns)
{
    if (!n || !status || !due_ns)
        return cfd_fail(CUDAFD_E_INVALID, "%s is NULL", !n ? "notifier" : !status ? "status" : "due_ns");
    int rc = cfd_driver_ready();
    if (rc != CUDAFD_OK)
        return rc;
    *status = 0;
    *due_ns = -1;
    pthread_mutex_lock(&g.mu);
    cfd_wait *w = cfd_wait_lookup(token);
    if (!w || (w->n && w->n != n)) {
        pthread_mutex_unlock(&g.mu);
        return cfd_fail(CUDAFD_E_UNKNOWN_TOKEN, "token %llu is not pending on this notifier",
                        (unsigned long long)token);
    }
    cfd_lane *l = w->lane;
    if (l->state != LANE_CALLER || l->head != w || !w->n) { /* the core reports it (or it was cancelled) */
        rc = cfd_caller_release(l);
        if (n->clock >= 0)
            clock_arm(n->clock, 0);
        pthread_mutex_unlock(&g.mu);
        return rc;
    }
    if (l->polling) {
        pthread_mutex_unlock(&g.mu);
        return cfd_fail(CUDAFD_E_STATE, "token %llu is being checked on another thread", (unsigned long long)token);
    }
    CUevent ev = w->ev;
    l->polling = true;
    cfd_probe_begin();
    pthread_mutex_unlock(&g.mu);

    /* No context is made current: an event is queried from any thread, as
     * the poller does (and a cuCtxGetCurrent first was the call that paid
     * the cold driver's entry, right after the caller's wake). */
    int64_t asked = cfd_now_ns();
    CUresult r = cu.cuEventQuery(ev);

    pthread_mutex_lock(&g.mu);
    cfd_probe_end();
    int64_t now = cfd_now_ns();
    if (r != CUDA_ERROR_NOT_READY) {
        if (r == CUDA_SUCCESS)
            cfd_caller_found(l, now, asked);
        if (w->n == n) {
            complete_quietly(l, r);
            *status = r;
            *due_ns = 0;
        } else {
            cfd_lane_pop(l, r); /* detached meanwhile: reported by the fd (a fault), or cancelled */
        }
    } else if (w->n == n && !l->hand_back) {
        cfd_caller_missed(l, now);
        *due_ns = l->next_poll;
    }
    l->polling = false; /* only now: a fault swept by that pop may have asked for the lane back */
    if (n->clock >= 0) {
        int64_t at = *due_ns > 0 ? *due_ns : *due_ns == 0 && n->clock_idle > 0 ? now + n->clock_idle : 0;
        if (!clock_arm(n->clock, at) && *due_ns > 0)
            *due_ns = -1; /* it could not be armed: the poller takes the wait */
    }
    if (*due_ns <= 0)
        l->hand_back = true; /* done with it: the lane goes to the poller, or is freed if empty */
    if (l->hand_back)
        rc = cfd_caller_release(l);
    pthread_mutex_unlock(&g.mu);
    return rc;
}

CFD_API int cudafd_set_clock(cudafd_notifier *n, int timerfd, int64_t idle_ns)
{
    if (!n)
        return cfd_fail(CUDAFD_E_INVALID, "notifier is NULL");
    if (idle_ns < 0)
        return cfd_fail(CUDAFD_E_INVALID, "idle_ns is negative (%lld)", (long long)idle_ns);
    struct itimerspec t;
    if (timerfd >= 0 && timerfd_gettime(timerfd, &t) != 0)
        return cfd_fail(CUDAFD_E_INVALID, "fd %d is not a timerfd: %s", timerfd, strerror(errno));
    pthread_mutex_lock(&g.mu);
    n->clock = timerfd < 0 ? -1 : timerfd;
    n->clock_idle = timerfd < 0 ? 0 : idle_ns;
    pthread_mutex_unlock(&g.mu);
    return CUDAFD_OK;
}
