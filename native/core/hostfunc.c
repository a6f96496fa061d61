/*
 * hostfunc.c - the hostfunc mechanism: the driver itself tells us.
 *
 * For each point, a pooled event is recorded on the caller's stream; a side
 * stream waits for it and then runs a host function (cuLaunchHostFunc). The
 * caller's stream never waits for the host function, so it pays only the
 * event record. The host function runs on the driver's callback thread, where
 * no CUDA call is allowed: the trampoline only marks its wait fired and wakes
 * the watchdog, which confirms the wait's event and completes it. It waits
 * for the core's lock at most 2 ms (fired_later, below), so that a thread
 * holding it inside a driver call that waits for the GPU cannot stall the
 * host functions the GPU waits for.
 *
 * Facts relied on (H200, bench/fault_bystanders.py):
 *  - A host function queued before its context faulted may still run after
 *    the fault, though the work before it on the caller's stream never
 *    finished; one launched after the fault is refused (the sticky error).
 *    So a host function's run proves nothing: the trampoline only marks its
 *    wait fired and wakes the watchdog, which queries the wait's event and
 *    reports success only when the driver does (the sticky error otherwise).
 *  - A host function may also never run after a fault. The watchdog
 *    therefore queries, once a period (CUDAFD_OPT_WATCHDOG_NS), the event
 *    of the oldest point pending longer than that on each side stream, and
 *    completes it with the driver's error when the query reports one (a
 *    fault is the whole context's: every later query reports it too): a
 *    fault surfaces within about two watchdog periods instead of never.
 *    A stream runs in order, so a later point of the same side stream is
 *    not over before that one; asking only the oldest keeps a period's
 *    queries to one per side stream, however many waits are pending, and
 *    every side stream of every context is asked each period.
 *
 * Host functions in flight are few (CFD_NOTIFY_MAX): past the driver's own limit cuLaunchHostFunc blocks
 * until the GPU catches up, and on an H200 so does every other call into the
 * context, the caller's event loop with it. A watch past the budget records
 * its event and returns; the side stream's wait for it and the host function
 * are enqueued by the watchdog when one comes back, so a watch put off costs
 * what an event-mechanism watch does (one record), however many are pending.
 * Launches keep the order of the watches (once one is put off, the later
 * ones queue behind it, also while the watchdog is launching it), so the
 * waits of a stream still complete in order. A wait put off is not held up
 * by the host functions in flight: its event is queried with the fault
 * queries once it is the oldest of its side stream (a side stream shared
 * past CFD_SIDE_MAX streams may hold a launched wait ahead of it), and once
 * it reads done the wait completes, never launched. A wait put off whose
 * caller lets go of it (a cancel, its notifier's close) ends then.
 *
 * Side streams (contexts.c): the waits of one caller's stream share one, so
 * their host functions run in order; a stream with nothing in flight gets an
 * idle one, or a new one up to CFD_SIDE_MAX per context (one that a wait let
 * go of may have left waiting is taken last: pick_side), so a wait behind a
 * long kernel holds up no other stream's notification until more than
 * CFD_SIDE_MAX streams are in flight at once.
 */
#include <stdlib.h>
#include <time.h>

#include "internal.h"

static void *watchdog_main(void *arg);

/* The list of hostfunc waits in flight, oldest first: the watchdog looks at
 * them in watch order, so the waits of one stream complete in that order. */
static void hf_link(cfd_wait *w)
{
    w->next = NULL;
    w->hprev = g.hf_pending_tail;
    if (g.hf_pending_tail)
        g.hf_pending_tail->next = w;
    else
        g.hf_pending = w;
    g.hf_pending_tail = w;
}

static void hf_unlink(cfd_wait *w)
{
    if (w->hprev)
        w->hprev->next = w->next;
    else
        g.hf_pending = w->next;
    if (w->next)
        w->next->hprev = w->hprev;
    else
        g.hf_pending_tail = w->hprev;
    w->next = w->hprev = NULL;
}

bool cfd_notify_take(void)
{
    if (g.stat[ST_NOTIFY] >= CFD_NOTIFY_MAX) /* written under g.mu only */
        return false;
    cfd_count(ST_NOTIFY, 1);
    return true;
}

void cfd_notify_put(void)
{
    cfd_count(ST_NOTIFY, -1);
    if (g.hf_defer_head) /* the watchdog launches the next one put off */
        pthread_cond_signal(&g.watchdog_cv);
}

static void defer_push(cfd_wait *w)
{
    w->dnext = NULL;
    w->dprev = g.hf_defer_tail;
    if (g.hf_defer_tail)
        g.hf_defer_tail->dnext = w;
    else
        g.hf_defer_head = w;
    g.hf_defer_tail = w;
}

/* Out of the queue of launches put off (w is in it). */
static void defer_remove(cfd_wait *w)
{
    if (w->dprev)
        w->dprev->dnext = w->dnext;
    else
        g.hf_defer_head = w->dnext;
    if (w->dnext)
        w->dnext->dprev = w->dprev;
    else
        g.hf_defer_tail = w->dprev;
    w->dprev = w->dnext = NULL;
}

/* A wait leaves the hostfunc list (done, failed, faulted): its host function
 * no longer counts against the budget, or it is no longer to be launched. */
static void hf_leave(cfd_wait *w)
{
    hf_unlink(w);
    if (w->fired) {
        w->fired = false;
        g.hf_fired--;
    }
    if (w->launched) {
        w->launched = false;
        cfd_notify_put();
    } else {
        defer_remove(w);
    }
}

/* End every hostfunc wait of a faulted context (cudafd_release_idle): the
 * fault sweep delivered its result already, launched or not, fired or not.
 * No query of its event could tell more, and a host function that still
 * runs finds its token gone (trampoline), so none is asked about after
 * this, and the caller may destroy the context. g.mu held. */
void cfd_hostfunc_end_faulted_locked(void)
{
    cfd_wait *next;
    for (cfd_wait *w = g.hf_pending; w; w = next) {
        next = w->next;
        if (w->cx->fault) {
            hf_leave(w);
            cfd_wait_complete(w, w->cx->fault, true, false);
        }
    }
}

/* A caller lets go of a hostfunc wait (cudafd_cancel). One put off goes at
 * once: no host function of it was launched, so none will run, and left in
 * the queue the watchdog's fault check would go on asking about its event
 * and it would keep its side stream, in a context the caller may destroy
 * once its own work is over (cudafd_release_idle). Its side stream is past
 * it only if it never waited for its point (side_wait_due): else it may still
 * wait there, and is released stale. One launched stays until its host
 * function runs or a fault ends it. g.mu held; w may be freed. */
void cfd_hostfunc_drop_locked(cfd_wait *w)
{
    cfd_wait_drop(w);
    if (!w->launched) {
        hf_leave(w);
        cfd_wait_complete(w, 0, w->side_wait_due, false);
    }
}

/* The same for every wait put off that was let go of (its notifier closed). */
void cfd_hostfunc_end_dropped_locked(void)
{
    cfd_wait *next;
    for (cfd_wait *w = g.hf_defer_head; w; w = next) {
        next = w->dnext;
        if (!w->n)
            cfd_hostfunc_drop_locked(w);
    }
}

/* Tokens whose host function ran while g.mu stayed taken (fire_mu). A thread
 * holding g.mu may be inside a driver call that waits for the GPU, and on an
 * H200, once a context's host notifications are spent, every call into it
 * does: the GPU then waits for the host functions queued before, ours
 * included. So the driver's callback thread waits for g.mu at most 2 ms,
 * then leaves its token here; fire_mu is held only to add or take tokens,
 * never across a driver call. */
static pthread_mutex_t fire_mu = PTHREAD_MUTEX_INITIALIZER;
static uint64_t *fired_later;
static int nfired_later, capfired_later;

static void mark_fired(uint64_t token) /* g.mu held */
{
    cfd_wait *w = cfd_wait_lookup(token);
    if (w && !w->fired) { /* else the watchdog already reported a fault for it */
        w->fired = true;
        g.hf_fired++;
    }
}

/* The tokens the trampoline left in fired_later (g.mu held). */
void cfd_hostfunc_take_fired_locked(void)
{
    pthread_mutex_lock(&fire_mu);
    for (int i = 0; i < nfired_later; i++)
        mark_fired(fired_later[i]);
    nfired_later = 0;
    pthread_mutex_unlock(&fire_mu);
}

static bool keep_for_later(uint64_t token)
{
    pthread_mutex_lock(&fire_mu);
    if (nfired_later == capfired_later) {
        int cap = capfired_later ? 2 * capfired_later : CFD_NOTIFY_MAX;
        uint64_t *t = realloc(fired_later, (size_t)cap * sizeof *t);
        if (t) {
            fired_later = t;
            capfired_later = cap;
        }
    }
    bool kept = nfired_later < capfired_later;
    if (kept)
        fired_later[nfired_later++] = token;
    pthread_mutex_unlock(&fire_mu);
    return kept;
}

/* g.mu, waiting at most 2 ms: a holder that is not inside such a driver
 * call lets go within microseconds. (pthread_mutex_timedlock keeps time by
 * CLOCK_REALTIME: a step of the wall clock meanwhile only shortens or
 * lengthens this one wait.) */
static bool lock_briefly(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += 2000000;
    ts.tv_sec += ts.tv_nsec / 1000000000;
    ts.tv_nsec %= 1000000000;
    return pthread_mutex_timedlock(&g.mu, &ts) == 0;
}

static void trampoline(void *data)
{
    uint64_t token = (uint64_t)(uintptr_t)data;
    bool locked = pthread_mutex_trylock(&g.mu) == 0 || lock_briefly();
    if (!locked && !keep_for_later(token)) {
        pthread_mutex_lock(&g.mu); /* out of memory: wait for it after all */
        locked = true;
    }
    if (locked) {
        mark_fired(token);
        pthread_cond_signal(&g.watchdog_cv);
        pthread_mutex_unlock(&g.mu);
    } else { /* the watchdog takes it when woken, or before it next sleeps */
        pthread_cond_signal(&g.watchdog_cv);
    }
}

int cfd_hostfunc_watch(cudafd_notifier *n, cfd_ctx *cx, CUstream user_stream, uintptr_t stream_key,
                       CUevent user_event, uint64_t *token)
{
    if (!cu.cuLaunchHostFunc)
        return cfd_fail(CUDAFD_E_UNSUPPORTED, "the driver has no cuLaunchHostFunc");
    CUstream side = NULL;
    CUevent ev = NULL;
    /* Which one the caller named: the event, else the stream (which may be
     * NULL: the legacy default stream, handle 0). */
    bool on_stream = !user_event;
    uintptr_t key = on_stream ? stream_key : (uintptr_t)user_event;
    int side_index;
    int rc = cfd_side_stream(&cx->side, key, true, &side, &side_index);
    if (rc != CUDAFD_OK)
        return rc;
    CUresult r;
    bool waited = true; /* the side stream waits for ev already */
    bool side_waits = false; /* the side stream waits for the point (released stale on failure) */
    if (on_stream) {
        /* the point on the caller's stream; the side stream waits for it now
         * if the host function can be launched now, else at the launch */
        pthread_mutex_lock(&g.mu);
        waited = !g.hf_defer_head && !g.hf_launching && g.stat[ST_NOTIFY] < CFD_NOTIFY_MAX;
        pthread_mutex_unlock(&g.mu);
        rc = cfd_record(cx, user_stream, NULL, &ev);
        if (rc == CUDAFD_OK && waited && (r = cu.cuStreamWaitEvent(side, ev, 0)) != CUDA_SUCCESS)
            rc = cfd_fail_cuda(r, "cuStreamWaitEvent (side stream)");
        side_waits = rc == CUDAFD_OK && waited;
    } else {
        /* the side stream waits for the caller's event; our event marks that */
        if ((r = cu.cuStreamWaitEvent(side, user_event, 0)) != CUDA_SUCCESS)
            rc = cfd_fail_cuda(r, "cuStreamWaitEvent on the event");
        side_waits = rc == CUDAFD_OK;
        if (rc == CUDAFD_OK)
            rc = cfd_record(cx, side, NULL, &ev);
    }
    if (rc != CUDAFD_OK) {
        pthread_mutex_lock(&g.mu);
        if (ev)
            cfd_ctx_give_event(cx, ev);
        cfd_side_release(&cx->side, key, side_index, !side_waits);
        pthread_mutex_unlock(&g.mu);
        return rc;
    }

    pthread_mutex_lock(&g.mu);
    cfd_wait *w = NULL;
    if (n->closed)
        rc = cfd_closed_error();
    else if (!(w = cfd_wait_new(n, cx, ev)))
        rc = cfd_fail(CUDAFD_E_NOMEM, "out of memory for a wait");
    else { /* the wait holds the side stream now */
        w->side = (int8_t)side_index;
        w->side_key = key;
    }
    if (rc == CUDAFD_OK && !g.watchdog_running) {
        if ((rc = cfd_start_thread(watchdog_main, "cudafd-watchdog")) == CUDAFD_OK)
            g.watchdog_running = true;
    }
    if (rc != CUDAFD_OK) {
        if (w) {
            cfd_wait_discard(w, !side_waits);
        } else {
            cfd_ctx_give_event(cx, ev);
            cfd_side_release(&cx->side, key, side_index, !side_waits);
        }
        pthread_mutex_unlock(&g.mu);
        return rc;
    }
    bool watchdog_idle = !g.hf_pending; /* it sleeps untimed while nothing is pending */
    hf_link(w);
    bool launch = waited && !g.hf_defer_head && !g.hf_launching && cfd_notify_take();
    if (launch) {
        w->launched = true;
    } else { /* the watchdog launches it: this thread must not block */
        w->side_wait_due = !waited;
        defer_push(w);
    }
    /* Else it is up, or comes up when a host function comes back
     * (cfd_notify_put); but a wait put off only because the budget was spent
     * when it looked, and has room again now, is launched at once. */
    if (watchdog_idle || (!launch && g.stat[ST_NOTIFY] < CFD_NOTIFY_MAX))
        pthread_cond_signal(&g.watchdog_cv);
    uint64_t tok = w->token;
    *token = tok;
    if (!launch) {
        pthread_mutex_unlock(&g.mu);
        return CUDAFD_OK;
    }
    /* From here the trampoline may run, or a fault end the wait, and free w
     * at any moment, and with it its hold on the side stream: the launch is a
     * probe, so that no release retires the side stream under it. */
    cfd_probe_begin();
    pthread_mutex_unlock(&g.mu);
    r = cu.cuLaunchHostFunc(side, trampoline, (void *)(uintptr_t)tok);
    pthread_mutex_lock(&g.mu);
    cfd_probe_end();
    if (r == CUDA_SUCCESS) {
        pthread_mutex_unlock(&g.mu);
        return CUDAFD_OK;
    }
    /* A fault reported for the wait already (the watchdog's query, or a sweep
     * after another wait's fault) is what refused the launch: the watch
     * stands, its completion queued. Else it fails and leaves nothing. */
    bool refused = false;
    if ((w = cfd_wait_lookup(tok)) != NULL) {
        refused = !w->delivered;
        hf_leave(w);
        if (refused)
            cfd_wait_discard(w, !side_waits);
        else
            cfd_wait_complete(w, r, !side_waits, false);
    }
    pthread_mutex_unlock(&g.mu);
    return refused ? cfd_fail_cuda(r, "cuLaunchHostFunc") : CUDAFD_OK;
}

/* Launch the host functions put off, in order, while the budget allows
 * (watchdog thread, g.mu held; released around each launch). The launch
 * counts as a probe, so no release retires its side stream under it; the
 * wait may end meanwhile (a fault sweep's end in cudafd_release_idle), so it
 * is looked up again after. A wait at the head whose result a fault sweep
 * delivered already (detached, never launched) is dropped unlaunched:
 * nobody asks about it. */
static void launch_deferred(CUcontext *current)
{
    while (g.hf_defer_head) {
        cfd_wait *w = g.hf_defer_head;
        if (w->n && !cfd_notify_take())
            return;
        defer_remove(w);
        if (!w->n) {
            hf_unlink(w);
            cfd_wait_complete(w, 0, w->side_wait_due, false); /* (as cfd_hostfunc_drop_locked) */
            continue;
        }
        w->launched = true;
        uint64_t tok = w->token;
        CUcontext ctx = w->cx->ctx;
        CUstream side = w->cx->side.stream[w->side];
        cfd_probe_begin();
        CUevent ev = w->side_wait_due ? w->ev : NULL;
        w->side_wait_due = false;
        g.hf_launching = true; /* a watch meanwhile queues behind this launch */
        pthread_mutex_unlock(&g.mu);
        if (ctx != *current && cu.cuCtxSetCurrent(ctx) == CUDA_SUCCESS)
            *current = ctx;
        CUresult r = ev ? cu.cuStreamWaitEvent(side, ev, 0) : CUDA_SUCCESS;
        bool side_waits = r == CUDA_SUCCESS; /* for its point, since the watch or now */
        if (r == CUDA_SUCCESS)
            r = cu.cuLaunchHostFunc(side, trampoline, (void *)(uintptr_t)tok);
        pthread_mutex_lock(&g.mu);
        g.hf_launching = false;
        pthread_cond_broadcast(&g.poller_gone_cv); /* cudafd_release_idle waits for the launch */
        if (r != CUDA_SUCCESS && (w = cfd_wait_lookup(tok)) != NULL) {
            hf_leave(w);
            cfd_wait_complete(w, r, !side_waits, false); /* a faulted or destroyed context: the wait reports it */
        }
        cfd_probe_end();
    }
}

static void bury_parked_events(void)
{
    /* events parked by the trampoline while nothing was open */
    if (g.nopen == 0 && !g.probing)
        cfd_quiesce_locked();
}

/* One query of a watchdog round. */
struct ask {
    uint64_t token;
    CUevent ev;
    CUcontext ctx;
    uintptr_t key; /* the caller's stream (or event) */
    CUresult r;
};

/* Double the capacity of the watchdog's two round arrays (g.mu held). */
static bool grow(struct ask **batch, int **held, int *cap)
{
    int n = *cap ? 2 * *cap : CFD_NOTIFY_MAX;
    struct ask *b = realloc(*batch, (size_t)n * sizeof *b);
    if (!b)
        return false;
    *batch = b;
    int *h = realloc(*held, (size_t)n * sizeof **held);
    if (!h)
        return false;
    *held = h;
    *cap = n;
    return true;
}

/* Sleep on g.watchdog_cv (g.mu held) at most ns; fork.c makes it keep
 * time by CLOCK_MONOTONIC. */
static void watchdog_wait_ns(int64_t ns)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    int64_t t = (int64_t)ts.tv_nsec + ns;
    ts.tv_sec += (time_t)(t / 1000000000);
    ts.tv_nsec = (long)(t % 1000000000);
    pthread_cond_timedwait(&g.watchdog_cv, &g.mu, &ts);
}

static void *watchdog_main(void *arg)
{
    struct ask *batch = NULL;
    int *held = NULL; /* the round's queries whose wait stays pending (its stream's later ones wait) */
    int cap = 0;            /* of both: grown to the round's queries (one a side stream, plus the fired waits) */
    CUcontext current = NULL;
    int64_t next_check = 0; /* fault queries once a period, however often it is woken */
    uint64_t round = 0;     /* batches made, for cx->side.asked */
    pthread_mutex_lock(&g.mu);
    for (;;) {
        cfd_hostfunc_take_fired_locked();
        bury_parked_events();
        launch_deferred(&current);
        if (!g.hf_pending) {
            if (g.nopen == 0)
                break;
            pthread_cond_wait(&g.watchdog_cv, &g.mu);
            next_check = cfd_now_ns() + g.watchdog_ns;
            continue;
        }
        int64_t now = cfd_now_ns();
        bool periodic = now >= next_check;
        cfd_hostfunc_take_fired_locked(); /* (any kept while launch_deferred let go of g.mu) */
        if (!periodic && g.hf_fired == 0) { /* woken early: a wait came, or a budget slot freed */
            watchdog_wait_ns(next_check - now);
            continue;
        }
        if (periodic)
            next_check = now + g.watchdog_ns;
        int64_t old = periodic ? now - g.watchdog_ns : INT64_MIN;
        round++;
        int k = 0;
        for (cfd_wait *w = g.hf_pending; w; w = w->next) {
            if (!w->fired && w->t0 > old)
                continue;
            if (!w->fired) { /* of the waits not fired, the oldest of each side stream */
                uint64_t *asked = &w->cx->side.asked[w->side];
                if (*asked == round)
                    continue;
                *asked = round;
            }
            if (k == cap && !grow(&batch, &held, &cap))
                break; /* out of memory: the rest wait for a later round */
            batch[k].token = w->token, batch[k].ev = w->ev, batch[k].ctx = w->cx->ctx;
            batch[k++].key = w->side_key;
        }
        if (k == 0)
            continue;
        cfd_probe_begin();
        g.hf_querying = true;
        pthread_mutex_unlock(&g.mu);
        for (int i = 0; i < k; i++) {
            if (batch[i].ctx != current && cu.cuCtxSetCurrent(batch[i].ctx) == CUDA_SUCCESS)
                current = batch[i].ctx;
            batch[i].r = cu.cuEventQuery(batch[i].ev);
        }
        pthread_mutex_lock(&g.mu);
        g.hf_querying = false;
        cfd_probe_end();
        bool unconfirmed = false; /* a host function ran before its event read as done */
        int nheld = 0;
        for (int i = 0; i < k; i++) { /* oldest first (hf_link) */
            cfd_wait *w = cfd_wait_lookup(batch[i].token);
            if (!w)
                continue;
            /* success once its host function ran (before that, the side
             * stream may still hold the launch's resources) or, for a wait
             * put off, whose side stream holds nothing of it, once its event
             * is; not ahead of an earlier wait on the same stream that is
             * still pending */
            bool done = batch[i].r == CUDA_SUCCESS && (w->fired || !w->launched);
            if (done)
                for (int j = 0; j < nheld && done; j++) /* a stream is its key in its context */
                    done = batch[held[j]].key != batch[i].key || batch[held[j]].ctx != batch[i].ctx;
            if (batch[i].r != CUDA_SUCCESS && batch[i].r != CUDA_ERROR_NOT_READY) {
                hf_leave(w);
                cfd_wait_complete(w, batch[i].r, true, false); /* a fault: no order to keep */
            } else if (done) {
                hf_leave(w);
                cfd_wait_complete(w, CUDA_SUCCESS, true, false); /* its side stream is past its event */
            } else {
                unconfirmed |= w->fired;
                held[nheld++] = i;
            }
        }
        pthread_cond_broadcast(&g.poller_gone_cv); /* cudafd_release_idle waits for the round and the waits that fired */
        if (unconfirmed) /* asked again in a moment, not in a busy loop */
            watchdog_wait_ns(1000000);
    }
    free(batch);
    free(held);
    pthread_mutex_lock(&fire_mu); /* (what is left there is of waits that ended) */
    free(fired_later);
    fired_later = NULL;
    nfired_later = capfired_later = 0;
    pthread_mutex_unlock(&fire_mu);
    g.watchdog_running = false;
    pthread_cond_broadcast(&g.poller_gone_cv);
    cfd_thread_exit_locked();
    pthread_mutex_unlock(&g.mu);
    return arg;
}
