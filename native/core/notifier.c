/*
 * notifier.c - a notifier: an eventfd plus a queue of completions.
 *
 * Facts relied on (eventfd(2)): a nonblocking eventfd is readable while its
 * counter is nonzero; write() adds to the counter, read() returns and zeroes
 * it. cudafd keeps "counter nonzero" equal to "queue nonempty or closed" by
 * writing only when a push finds the queue empty, and reading only when a
 * drain empties it, both under the queue's mutex. So the fd is level-
 * triggered on the queue: no completion can sit in the queue while the fd is
 * quiet, and a drain never reports a completion twice. Pushes are queue.c's.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "internal.h"

void cfd_detach_all(cudafd_notifier *n); /* waits.c */

static void clear_fd(cudafd_notifier *n)
{
    uint64_t value;
    while (read(n->fd, &value, sizeof value) < 0 && errno == EINTR)
        ;
}

CFD_API int cudafd_notifier_create(int mechanism, cudafd_notifier **out)
{
    if (!out)
        return cfd_fail(CUDAFD_E_INVALID, "out is NULL");
    *out = NULL;
    int rc = cudafd_mechanism_available(mechanism);
    if (rc != CUDAFD_OK)
        return rc;
    cudafd_notifier *n = calloc(1, sizeof *n);
    if (!n)
        return cfd_fail(CUDAFD_E_NOMEM, "out of memory for a notifier");
    n->fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (n->fd < 0) {
        int err = errno;
        free(n);
        return cfd_fail(CUDAFD_E_SYS, "eventfd: %s", strerror(err));
    }
    n->mech = mechanism;
    pthread_mutex_init(&n->mu, NULL);
    pthread_mutex_lock(&g.mu);
    n->max_lateness = g.max_lateness_ns;
    n->fork_gen = g.fork_gen;
    g.nopen++;
    pthread_mutex_unlock(&g.mu);
    cfd_count(ST_EVENTFDS, 1);
    cfd_count(ST_NOTIFIERS, 1);
    *out = n;
    return CUDAFD_OK;
}

CFD_API int cudafd_notifier_fd(const cudafd_notifier *n) { return n ? n->fd : -1; }

CFD_API int cudafd_notifier_set_max_lateness(cudafd_notifier *n, int64_t ns)
{
    if (!n)
        return cfd_fail(CUDAFD_E_INVALID, "notifier is NULL");
    if (cfd_inherited(n))
        return cfd_inherited_error();
    if (ns < CUDAFD_MAX_LATENESS_MIN_NS || ns > CUDAFD_MAX_LATENESS_MAX_NS)
        return cfd_fail(CUDAFD_E_INVALID, "max_lateness %lld ns is outside [%lld, %lld]", (long long)ns,
                        (long long)CUDAFD_MAX_LATENESS_MIN_NS, (long long)CUDAFD_MAX_LATENESS_MAX_NS);
    pthread_mutex_lock(&g.mu);
    bool closed = n->closed;
    if (!closed)
        n->max_lateness = ns;
    pthread_mutex_unlock(&g.mu);
    return closed ? cfd_closed_error() : CUDAFD_OK;
}

CFD_API int cudafd_drain(cudafd_notifier *n, cudafd_completion *out, int max)
{
    if (!n || (!out && max > 0) || max < 0)
        return cfd_fail(CUDAFD_E_INVALID, "bad drain arguments");
    if (cfd_inherited(n))
        return cfd_inherited_error();
    return cfd_notifier_take(n, out, max);
}

int cfd_notifier_take(cudafd_notifier *n, cudafd_completion *out, int max)
{
    pthread_mutex_lock(&n->mu);
    int rc;
    if (n->closed && n->qlen == 0) {
        rc = cfd_closed_error();
    } else {
        size_t take = n->qlen < (size_t)max ? n->qlen : (size_t)max;
        if (take > 0) /* out may be NULL with max 0, and q is NULL until the first push */
            memcpy(out, n->q + n->qhead, take * sizeof *out);
        n->qhead += take;
        n->qlen -= take;
        if (n->qlen == 0) {
            n->qhead = 0;
            if (take > 0 && !n->closed)
                clear_fd(n);
        }
        rc = (int)take;
    }
    pthread_mutex_unlock(&n->mu);
    return rc;
}

CFD_API int cudafd_notifier_pending(const cudafd_notifier *n)
{
    if (!n)
        return cfd_fail(CUDAFD_E_INVALID, "notifier is NULL");
    if (cfd_inherited(n))
        return cfd_inherited_error();
    cudafd_notifier *m = (cudafd_notifier *)n;
    pthread_mutex_lock(&g.mu);
    pthread_mutex_lock(&m->mu);
    int count = m->nattached + (int)m->qlen;
    pthread_mutex_unlock(&m->mu);
    pthread_mutex_unlock(&g.mu);
    return count;
}

CFD_API int cudafd_notifier_close(cudafd_notifier *n)
{
    if (!n)
        return cfd_fail(CUDAFD_E_INVALID, "notifier is NULL");
    if (cfd_inherited(n)) { /* no lock of its own (a parent's thread may have held it), no driver */
        if (!__atomic_exchange_n(&n->closed, true, __ATOMIC_ACQ_REL)) {
            /* The eventfd is the parent's too (fork() shares it): writing it would
             * leave the parent's fd readable with nothing queued. This fd number
             * gets a readable eventfd of the child's own instead. */
            int own = eventfd(1, EFD_NONBLOCK | EFD_CLOEXEC);
            if (own >= 0) {
                dup3(own, n->fd, O_CLOEXEC);
                close(own);
            }
        }
        return CUDAFD_OK;
    }
    pthread_mutex_lock(&g.mu);
    if (!n->closed) {
        cfd_detach_all(n);
        cfd_hostfunc_end_dropped_locked();
        pthread_mutex_lock(&n->mu);
        __atomic_store_n(&n->closed, true, __ATOMIC_RELEASE);
        bool was_quiet = n->qlen == 0;
        n->qhead = n->qlen = 0;
        if (was_quiet)
            cfd_notifier_signal(n); /* wake whoever polls: the next drain says closed */
        pthread_mutex_unlock(&n->mu);
        g.nopen--;
        cfd_quiesce_locked();
        /* Waiter threads notice nopen == 0 and leave once idle. */
        cfd_wake_poller();
        pthread_cond_broadcast(&g.watchdog_cv);
    }
    pthread_mutex_unlock(&g.mu);
    return CUDAFD_OK;
}

CFD_API void cudafd_notifier_destroy(cudafd_notifier *n)
{
    if (!n)
        return;
    cudafd_notifier_close(n);
    close(n->fd);
    if (!cfd_inherited(n)) /* else its state is whatever the parent's threads left */
        pthread_mutex_destroy(&n->mu);
    free(n->q);
    free(n);
    cfd_count(ST_EVENTFDS, -1);
    cfd_count(ST_NOTIFIERS, -1);
}

/* One step of cudafd_release_idle's wait for the core's threads to let go
 * of every wait they may still ask about: true when there is nothing to
 * wait for, else it waited once (g.mu let go meanwhile) and the caller asks
 * again from the first condition, since another thread may have closed a
 * notifier or begun a probe meanwhile. g.mu held. */
static bool settle_step_locked(void)
{
    /* With no notifier open the poller drops every wait and leaves; it may be
     * asking about a closed notifier's wait right now, unlocked: once it has
     * left, no event of the caller's contexts is asked about again, so the
     * caller can destroy one (a real driver crashes on a dead event). */
    if (g.nopen == 0 && g.poller_running) {
        cfd_wake_poller();
        pthread_cond_wait(&g.poller_gone_cv, &g.mu);
        return false;
    }
    /* With notifiers open, the poller takes the dropped waits (cancelled, of
     * closed notifiers) out of its lanes at its next round, and with them those
     * whose result went already (to an ask, or by a fault sweep): wait for it. */
    if (g.nopen > 0)
        cfd_drop_detached_locked();
    cfd_hostfunc_end_faulted_locked(); /* (their results went with the fault sweep) */
    if (g.hf_querying || g.hf_launching) { /* the watchdog may be asking about one, or launching it */
        pthread_cond_wait(&g.poller_gone_cv, &g.mu);
        return false;
    }
    if (g.nopen > 0 && g.reap_due && g.poller_running) {
        cfd_wake_poller();
        pthread_cond_wait(&g.poller_gone_cv, &g.mu);
        return false;
    }
    /* A hostfunc wait whose host function ran is asked about once more by the
     * watchdog before it ends (hostfunc.c), cancelled or not: wait for that
     * too, so that a context whose work is over holds no wait after this. */
    cfd_hostfunc_take_fired_locked();
    if (g.hf_fired > 0 && g.watchdog_running) {
        pthread_cond_signal(&g.watchdog_cv);
        pthread_cond_wait(&g.poller_gone_cv, &g.mu);
        return false;
    }
    /* A probe (an ask on another thread, the watchdog's round or a launch)
     * keeps what it may touch. Once none runs, none begins before
     * cudafd_release_idle returns. */
    if (g.probing > 0) {
        pthread_cond_wait(&g.poller_gone_cv, &g.mu);
        return false;
    }
    return true;
}

CFD_API int cudafd_release_idle(void)
{
    int forked = cfd_fork_check(); /* the streams are the parent's: nothing to destroy here */
    if (forked != CUDAFD_OK)
        return forked;
    pthread_mutex_lock(&g.mu);
    while (!settle_step_locked())
        ;
    int64_t before = g.stat[ST_STREAMS];
    /* The semaphores first: freeing a context's record may release the
     * last reference to a primary context, and theirs die with it. */
    cfd_syncfd_release_idle_locked();
    if (g.nopen == 0) {
        cfd_retire_side_streams_locked();
        cfd_quiesce_locked();
    } else {
        cfd_release_unused_locked();
    }
    int released = (int)(before - g.stat[ST_STREAMS]);
    pthread_mutex_unlock(&g.mu);
    return released;
}

CFD_API int cudafd_mechanism_available(int mechanism)
{
    if (mechanism < CUDAFD_MECH_EVENT || mechanism > CUDAFD_MECH_SYNCFD)
        return cfd_fail(CUDAFD_E_INVALID, "unknown mechanism %d", mechanism);
    int rc = cudafd_driver_load();
    if (rc != CUDAFD_OK)
        return rc;
    if (mechanism == CUDAFD_MECH_SYNCFD)
        return cfd_syncfd_available(); /* the probe, run once (syncfd.c) */
    if (mechanism == CUDAFD_MECH_HOSTFUNC && !cu.cuLaunchHostFunc)
        return cfd_fail(CUDAFD_E_UNSUPPORTED, "the driver %s has no cuLaunchHostFunc", cudafd_driver_path());
    return CUDAFD_OK;
}
