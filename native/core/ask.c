/*
 * ask.c - the caller's own thread asks whether one of its waits is over.
 *
 * A task that never sleeps (a spin notifier's wait awaited in an event loop:
 * the task yields to its loop and asks again at every pass) can find its
 * wait's end itself: cudafd_ask_token() queries the wait's event on the
 * calling thread and, once the work is over or failed, reports the wait to
 * the caller right there. No hand-over from the poller's thread to the
 * caller's (12-14 us on an H200 host: docs/performance.md), no queue, no
 * eventfd write and read: the task that asked resumes in the pass that found
 * the end, as a task polling an event of its own does.
 *
 * Order. A wait is over once its own work is; the caller that asks about
 * several waits of one stream keeps their order itself (the Python policy
 * asks only about the first wait of each stream it has in progress), since
 * the poller's backstop may queue an earlier one meanwhile anyway.
 *
 * While a spin notifier is asking (cudafd_notifier_set_asking), its new waits
 * go to lanes of their own that the poller asks only every max(max_lateness,
 * 10 ms) instead of spinning on them (waiters.c): the poller remains the
 * backstop (a caller that stops asking) and pops what the callers took,
 * without keeping a second core busy or contending for the lock with them.
 * What the poller finds first goes through the queue as usual; the ask then
 * answers CUDAFD_E_UNKNOWN_TOKEN, and the caller drains.
 *
 * Ownership. The lanes stay the poller's: a wait found over here is handed
 * to the caller (detached from its notifier as if drained) but left in its
 * lane, which the poller pops on its schedule. So a lane is still changed by
 * one thread only. The query runs unlocked inside a probe (cfd_probe_begin:
 * no event is destroyed meanwhile); a token that is no longer pending on the
 * notifier when the lock is taken again is not taken, so an event reused by a
 * later wait in the meantime is never taken for this one.
 *
 * Facts relied on: cuEventQuery costs no system call on a real GPU.
 */
#include "internal.h"

static bool may_ask(const cudafd_notifier *n)
{
    return n->mech == CUDAFD_MECH_EVENT || n->mech == CUDAFD_MECH_SPIN;
}

CFD_API int cudafd_notifier_set_asking(cudafd_notifier *n, int on)
{
    if (!n)
        return cfd_fail(CUDAFD_E_INVALID, "notifier is NULL");
    if (cfd_inherited(n))
        return cfd_inherited_error();
    if (n->mech != CUDAFD_MECH_SPIN)
        return cfd_fail(CUDAFD_E_INVALID, "only a spin notifier's waits can be left to its caller's asks");
    pthread_mutex_lock(&g.mu);
    bool closed = n->closed;
    if (!closed)
        n->asking = on != 0;
    pthread_mutex_unlock(&g.mu);
    return closed ? cfd_closed_error() : CUDAFD_OK;
}

int cfd_lane_kind(const cudafd_notifier *n)
{
    return n->asking ? CFD_LANE_ASKED : n->mech;
}

/* The wait of token if it is pending on n, else NULL. g.mu held. */
static cfd_wait *pending_on(cudafd_notifier *n, uint64_t token)
{
    cfd_wait *w = cfd_wait_lookup(token);
    return w && w->n == n ? w : NULL;
}

static int not_pending(uint64_t token)
{
    return cfd_fail(CUDAFD_E_UNKNOWN_TOKEN,
                    "token %llu is not pending on this notifier: reported already (drain it) or cancelled",
                    (unsigned long long)token);
}

CFD_API int cudafd_ask_token(cudafd_notifier *n, uint64_t token, int64_t *status)
{
    if (!n || !status)
        return cfd_fail(CUDAFD_E_INVALID, "%s", !n ? "notifier is NULL" : "status is NULL");
    if (!may_ask(n))
        return cfd_fail(CUDAFD_E_INVALID, "only the waits of an event or spin notifier can be asked about");
    int rc = cfd_fork_check();
    if (rc != CUDAFD_OK)
        return rc;
    if (cfd_inherited(n))
        return cfd_inherited_error();
    pthread_mutex_lock(&g.mu);
    bool closed = n->closed;
    cfd_wait *w = closed ? NULL : pending_on(n, token);
    if (!w) {
        pthread_mutex_unlock(&g.mu);
        return closed ? cfd_closed_error() : not_pending(token);
    }
    CUevent ev = w->ev;
    CUcontext ctx = w->cx->ctx;
    cfd_probe_begin();
    pthread_mutex_unlock(&g.mu);

    bool pushed = false;
    CUresult r = CUDA_ERROR_NOT_READY; /* a context that cannot be entered: the poller reports the wait */
    if (cfd_enter_ctx(ctx, &pushed) == CUDAFD_OK) {
        r = cu.cuEventQuery(ev);
        cfd_leave_ctx(pushed);
        cfd_count(ST_QUERIES, 1);
    }

    pthread_mutex_lock(&g.mu);
    if (n->closed)
        rc = cfd_closed_error();
    else if (pending_on(n, token) != w || (r != CUDA_ERROR_NOT_READY && !cfd_wait_take(w, r)))
        rc = not_pending(token); /* reported meanwhile (the poller, a fault sweep) or cancelled */
    else if (r != CUDA_ERROR_NOT_READY)
        *status = r, rc = 1;
    else
        rc = 0;
    cfd_probe_end();
    pthread_mutex_unlock(&g.mu);
    return rc;
}
