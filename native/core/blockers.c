/*
 * blockers.c - the blocking waiters of the event mechanism: a pool of
 * threads, capped at CUDAFD_OPT_MAX_THREADS, each sleeping in
 * cuEventSynchronize for one lane at a time. The poller offers them lanes
 * paced for CUDAFD_OPT_BLOCK_AFTER_NS (waiters.c, pacing.c): for waits that
 * long, a blocking waiter's cost (137-168 us of CPU per wait on an H200) is
 * noise, and the poller no longer wakes for them. A blocker takes a queued
 * lane only while the poller holds no snapshot of it (l->polling), and then
 * alone completes its waits, in order; the poller keeps querying blocked
 * lanes' heads for faults (check_health in waiters.c). Each blocker's bridge
 * is a host notification: with none free (CFD_NOTIFY_MAX, internal.h) it
 * queries its lane every millisecond instead of sleeping on it.
 */
#include <time.h>

#include "internal.h"

#define NAP_NO_ROOM_NS (1000 * 1000) /* a blocker without a free bridge queries its lane this often */

static void *blocker_main(void *arg);

/* Offer a slow lane to the blocking waiters: an idle one takes it, or a new
 * one is started while more lanes are queued than blockers idle (each
 * blocker holds its lane until the lane's waits are done, so an idle one
 * woken for an earlier offer is not one for this lane). */
bool cfd_offer_to_blockers(cfd_lane *l)
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
    g.nqueued++;
    if (g.idle_blockers > 0)
        pthread_cond_signal(&g.blocker_cv);
    if (g.idle_blockers >= g.nqueued)
        return true;
    if (g.nblockers < g.max_threads && cfd_start_thread(blocker_main, "cudafd-blocker") == CUDAFD_OK) {
        g.nblockers++;
        return true;
    }
    return g.idle_blockers > 0; /* else the poller keeps pacing it until a blocker is free */
}

/* Sleep until `ev` completes; cx->ctx current, g.mu not held. Pool events
 * are plain (contexts.c says why), and cuEventSynchronize spins on those: a
 * side stream waits for `ev` and records a blocking-sync event of this
 * thread's, which it sleeps on. One such record per blocked lane is far from
 * the driver's limit of pending ones. If the bridge cannot be set up, the
 * plain (spinning) synchronize still gives the right answer. */
static CUresult sleep_on(cfd_ctx *cx, CUevent ev)
{
    pthread_mutex_lock(&g.mu);
    bool room = cfd_notify_take(); /* a bridge is a host notification (internal.h) */
    pthread_mutex_unlock(&g.mu);
    if (!room) { /* none free: ask again in a while (NOT_READY: the caller comes back) */
        struct timespec nap = {0, NAP_NO_ROOM_NS};
        nanosleep(&nap, NULL);
        return cu.cuEventQuery(ev);
    }
    CUstream side = NULL;
    int index = -1;
    CUevent bridge = NULL;
    bool ok = cfd_side_stream(&cx->bridge, (uintptr_t)ev, false, &side, &index) == CUDAFD_OK &&
              cfd_event_create(&bridge, true) == CUDAFD_OK && cu.cuStreamWaitEvent(side, ev, 0) == CUDA_SUCCESS &&
              cu.cuEventRecord(bridge, side) == CUDA_SUCCESS;
    CUresult r = ok ? cu.cuEventSynchronize(bridge) : cu.cuEventSynchronize(ev);
    if (ok && r == CUDA_SUCCESS)
        r = cu.cuEventQuery(ev); /* the answer for ev itself */
    if (bridge)
        cfd_event_destroy(bridge); /* released by the driver once its record completes */
    pthread_mutex_lock(&g.mu);
    if (index >= 0)
        cfd_side_release(&cx->bridge, (uintptr_t)ev, index);
    cfd_notify_put();
    pthread_mutex_unlock(&g.mu);
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
        g.nqueued--;
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
        cfd_list_del(&g.slow_list, l);
        l->state = LANE_BLOCKED;
        cfd_list_add(&g.blocked_list, l);
        cfd_wake_poller_if_untimed(); /* it checks blocked lanes for faults on a timer */
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
                cfd_pace_push(l, cfd_now_ns() - l->since); /* a late bound, stepped back by later paced waits */
            cfd_count(ST_BLOCKED, 1); /* before the pop, which may push it: see deliver() */
            cfd_lane_pop(l, r);
            block = false; /* the following waits are often done already */
        }
        cfd_list_del(&g.blocked_list, l);
        l->state = 0;
        if (!l->queued)
            cfd_lane_free(l);
    }
    g.nblockers--;
    cfd_thread_exit_locked();
    pthread_mutex_unlock(&g.mu);
    return arg;
}
