/*
 * watch.c - the entry points a caller's thread runs: watch a stream or an
 * event, cancel a wait, and ask whether work is already done.
 *
 * A watch makes the stream's context current if it is not (and restores the
 * caller's after), records a pooled event at the stream's end, and appends a
 * wait to the stream's lane, in two short critical sections. Errors from the
 * driver go back to the caller; a sticky one is also reported to every
 * other wait of the context (cfd_note_fault).
 */
#include <stdio.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "internal.h"

static int check_notifier(cudafd_notifier *n)
{
    if (!n)
        return cfd_fail(CUDAFD_E_INVALID, "notifier is NULL");
    int rc = cfd_driver_ready();
    if (rc != CUDAFD_OK)
        return rc;
    return CUDAFD_OK;
}

/* Watches of one stream on several threads: the poller asks only a lane's
 * head (a stream runs in order), so a lane must hold its waits in the order
 * of their records on the stream. A watch's record (with its syncfd signal,
 * or a side stream's wait for an event) and its place in the lane are made
 * under one of these locks, chosen by the lane's stream key; a hostfunc
 * watch's record and launch, by its side stream's key (the caller's stream,
 * or event): a side stream runs in order too. A lock is held across those
 * driver calls, never with g.mu held, and nothing else takes it. */
#define ORDER_LOCKS 64
static pthread_mutex_t order_locks[ORDER_LOCKS];

__attribute__((constructor)) static void init_order_locks(void)
{
    for (int i = 0; i < ORDER_LOCKS; i++)
        pthread_mutex_init(&order_locks[i], NULL);
}

static pthread_mutex_t *order_lock(uintptr_t key)
{
    return &order_locks[(key ^ key >> 7 ^ key >> 17) % ORDER_LOCKS];
}

static uint64_t this_thread(void) { return (uint64_t)syscall(SYS_gettid); }

/* Queue a wait for a recorded pooled event on the lane of (ctx, stream key).
 * `side` (>= 0): the side stream held for `side_key`, which waits for the
 * caller's event and which the wait takes over; on failure it is released
 * here, stale (not known past that wait). */
static int enqueue(cudafd_notifier *n, cfd_ctx *cx, uintptr_t stream, uint64_t thread, CUevent ev,
                   int side, uintptr_t side_key, const cfd_syncpt *sp, uint64_t *token)
{
    pthread_mutex_lock(&g.mu);
    int rc = CUDAFD_OK;
    cfd_lane *l = NULL;
    cfd_wait *w = NULL;
    if (n->closed)
        rc = cfd_closed_error();
    else if (!(l = cfd_lane_get(cx->ctx, stream, thread, cfd_lane_kind(n))) || !(w = cfd_wait_new(n, cx, ev)))
        rc = cfd_fail(CUDAFD_E_NOMEM, "out of memory for a wait");
    if (w) {
        w->side = (int8_t)side;
        w->side_key = side_key;
        if (sp && sp->rec) {
            w->sp = *sp;
            cfd_syncfd_hold_locked(sp->rec, 1);
        }
    } else if (side >= 0) {
        cfd_side_release(&cx->side, side_key, side, false);
    }
    if (rc == CUDAFD_OK) {
        w->lane = l;
        bool was_empty = !l->head;
        if (l->tail)
            l->tail->next = w;
        else
            l->head = w;
        l->tail = w;
        if (was_empty)
            l->budget = w->budget;
        else
            cfd_lane_joined(l, w->budget);
        if (was_empty && !l->active && (rc = cfd_lane_activate(l)) != CUDAFD_OK) {
            l->head = l->tail = NULL;
            cfd_wait_discard(w, false);
            w = NULL;
        }
    } else if (!w) {
        cfd_ctx_give_event(cx, ev);
    }
    if (rc != CUDAFD_OK && l && !l->head && !l->active)
        cfd_lane_free(l);
    if (rc == CUDAFD_OK) {
        /* after the wait is in its lane: a wake finds it; a new pollfd: the
         * poller sleeps on it from its next round */
        if (w->sp.rec && cfd_syncfd_arm_locked(&w->sp))
            cfd_wake_poller();
        *token = w->token;
        cfd_ctx_release(cx); /* the wait holds the record now: drop the caller's hold */
    }
    pthread_mutex_unlock(&g.mu);
    return rc;
}

/* The context's record, held while a watch is set up (and, if `pooled` is
 * given, an idle event from its pool, in the same critical section). */
static cfd_ctx *ctx_record(CUcontext ctx, CUevent *pooled)
{
    pthread_mutex_lock(&g.mu);
    cfd_ctx *cx = cfd_ctx_get(ctx);
    if (cx) {
        cx->nwaits++;
        if (pooled)
            *pooled = cfd_ctx_take_event(cx);
        if (cx->primary == 0)
            cfd_ctx_hold_primary_locked(cx); /* a new record */
    }
    pthread_mutex_unlock(&g.mu);
    if (!cx)
        cfd_fail(CUDAFD_E_NOMEM, "out of memory for a context record");
    return cx;
}

/* Let go of the record ctx_record held; rc is the watch's result: a sticky
 * driver error goes to every other wait of the context. */
static void ctx_unhold(cfd_ctx *cx, int rc)
{
    pthread_mutex_lock(&g.mu);
    if (rc == CUDAFD_E_CUDA)
        cfd_note_fault(cx, cudafd_last_cuda_error());
    cfd_ctx_release(cx);
    if (g.nopen == 0)
        cfd_quiesce_locked();
    pthread_mutex_unlock(&g.mu);
}

/* An open notifier's watch of `stream`: its context, made current (cfd_leave_ctx after). */
static int enter_stream_ctx(cudafd_notifier *n, uintptr_t stream, CUcontext *ctx, bool *pushed)
{
    if (__atomic_load_n(&n->closed, __ATOMIC_ACQUIRE))
        return cfd_closed_error();
    CUresult r = cu.cuStreamGetCtx((CUstream)stream, ctx);
    if (r != CUDA_SUCCESS)
        return cfd_fail_cuda(r, "cuStreamGetCtx (is this a live stream?)");
    return cfd_enter_ctx(*ctx, pushed);
}

/* The syncfd mechanism's point just signalled: its sync_file, if fence_fd
 * is given, made before the wait is queued, so that a watch that fails here
 * leaves no completion for a token its caller never got. */
static int fence_make(const cfd_syncpt *sp, int *fence_fd)
{
    return fence_fd ? cfd_syncfd_sync_file(sp->id, sp->thr, fence_fd) : CUDAFD_OK;
}

/* The watch failed after fence_make: its sync_file goes. */
static void fence_drop(int *fence_fd)
{
    if (fence_fd && *fence_fd >= 0) {
        close(*fence_fd);
        *fence_fd = -1;
    }
}

/* What keeps the waits of one stream together (its lane, its hostfunc side
 * stream; cudafd_stream_key in the header): the driver's id of the stream,
 * unique for the process's life (cuStreamGetId, with the top bit set so that
 * it never equals a handle), else its handle (0 for CU_STREAM_LEGACY too:
 * both name the context's legacy stream). Not the handle where the id is
 * known: the driver hands a new stream the handle of a stream destroyed just
 * before, even while the destroyed one's work runs (an H200,
 * bench/handle_reuse.py), and waits keyed by the handle would wait for that
 * work too. */
static uintptr_t stream_key(uintptr_t stream)
{
    unsigned long long id;
    if (cu.cuStreamGetId && cu.cuStreamGetId((CUstream)stream, &id) == CUDA_SUCCESS)
        return (uintptr_t)(id | 1ull << 63);
    return stream == 1 ? 0 : stream;
}

static int watch_stream(cudafd_notifier *n, uintptr_t stream, uint64_t *token, int *fence_fd)
{
    int rc = check_notifier(n);
    if (rc != CUDAFD_OK)
        return rc;
    if (!token)
        return cfd_fail(CUDAFD_E_INVALID, "token is NULL");
    CUcontext ctx = NULL;
    bool pushed;
    if ((rc = enter_stream_ctx(n, stream, &ctx, &pushed)) != CUDAFD_OK)
        return rc;
    bool hostfunc = n->mech == CUDAFD_MECH_HOSTFUNC;
    CUevent taken = NULL;
    cfd_ctx *cx = ctx_record(ctx, hostfunc ? NULL : &taken);
    if (!cx) {
        cfd_leave_ctx(pushed);
        return CUDAFD_E_NOMEM;
    }
    uint64_t thread = (CUstream)stream == CU_STREAM_PER_THREAD ? this_thread() : 0;
    uintptr_t key = stream_key(stream);
    pthread_mutex_t *order = order_lock(key);
    pthread_mutex_lock(order);
    if (hostfunc) {
        rc = cfd_hostfunc_watch(n, cx, (CUstream)stream, key, NULL, token);
    } else {
        CUevent ev = NULL;
        cfd_syncpt sp = {NULL, 0, 0};
        if (n->mech == CUDAFD_MECH_SYNCFD &&
            ((rc = cfd_syncfd_signal(cx, (CUstream)stream, key, thread, &sp)) != CUDAFD_OK ||
             (rc = fence_make(&sp, fence_fd)) != CUDAFD_OK)) {
            pthread_mutex_lock(&g.mu);
            if (taken)
                cfd_ctx_give_event(cx, taken);
            pthread_mutex_unlock(&g.mu);
        } else {
            rc = cfd_record(cx, (CUstream)stream, taken, &ev);
        }
        if (rc == CUDAFD_OK) {
            rc = enqueue(n, cx, key, thread, ev, -1, 0, &sp, token);
            cfd_syncfd_signal_end(&sp);
            if (rc == CUDAFD_OK) { /* the common path: two critical sections in all */
                pthread_mutex_unlock(order);
                cfd_leave_ctx(pushed);
                return CUDAFD_OK;
            }
        }
        cfd_syncfd_signal_end(&sp);
        fence_drop(fence_fd);
    }
    pthread_mutex_unlock(order);
    cfd_leave_ctx(pushed);
    ctx_unhold(cx, rc);
    return rc;
}

CFD_API int cudafd_prepare(cudafd_notifier *n, uintptr_t stream)
{
    int rc = check_notifier(n);
    if (rc != CUDAFD_OK)
        return rc;
    CUcontext ctx = NULL;
    bool pushed;
    if ((rc = enter_stream_ctx(n, stream, &ctx, &pushed)) != CUDAFD_OK)
        return rc;
    cfd_ctx *cx = ctx_record(ctx, NULL);
    if (cx) {
        pthread_mutex_lock(&g.mu); /* the record is held: it outlives the unlocked fills */
        if (!cx->side.filled || cx->side.filling)
            cfd_side_fill_locked(&cx->side, CFD_SIDE_MAX);
        pthread_mutex_unlock(&g.mu);
    }
    cfd_leave_ctx(pushed);
    if (!cx)
        return CUDAFD_E_NOMEM;
    ctx_unhold(cx, CUDAFD_OK);
    return CUDAFD_OK;
}

CFD_API int cudafd_watch_stream(cudafd_notifier *n, uintptr_t stream, uint64_t *token)
{
    return watch_stream(n, stream, token, NULL);
}

static int watch_event(cudafd_notifier *n, uintptr_t event, uint64_t *token, int *fence_fd);

CFD_API int cudafd_watch_event(cudafd_notifier *n, uintptr_t event, uint64_t *token)
{
    return watch_event(n, event, token, NULL);
}

static int check_fence_args(cudafd_notifier *n, uint64_t *token, int *fence_fd)
{
    if (!n || !token || !fence_fd)
        return cfd_fail(CUDAFD_E_INVALID, "%s is NULL", !n ? "notifier" : !token ? "token" : "fence_fd");
    *fence_fd = -1;
    if (n->mech != CUDAFD_MECH_SYNCFD)
        return cfd_fail(CUDAFD_E_INVALID, "a sync_file fence needs a notifier of the syncfd mechanism");
    return CUDAFD_OK;
}

CFD_API int cudafd_watch_stream_fence(cudafd_notifier *n, uintptr_t stream, uint64_t *token, int *fence_fd)
{
    int rc = check_fence_args(n, token, fence_fd);
    return rc != CUDAFD_OK ? rc : watch_stream(n, stream, token, fence_fd);
}

CFD_API int cudafd_watch_event_fence(cudafd_notifier *n, uintptr_t event, uint64_t *token, int *fence_fd)
{
    int rc = check_fence_args(n, token, fence_fd);
    return rc != CUDAFD_OK ? rc : watch_event(n, event, token, fence_fd);
}

static int watch_event(cudafd_notifier *n, uintptr_t event, uint64_t *token, int *fence_fd)
{
    int rc = check_notifier(n);
    if (rc != CUDAFD_OK)
        return rc;
    if (!token || !event)
        return cfd_fail(CUDAFD_E_INVALID, "%s is NULL", token ? "event" : "token");
    if (__atomic_load_n(&n->closed, __ATOMIC_ACQUIRE))
        return cfd_closed_error();
    /* Events carry no query for their context: the caller's current context is
     * the one the waiters make current, and the one whose side stream waits. */
    CUcontext ctx = NULL;
    CUresult r = cu.cuCtxGetCurrent(&ctx);
    if (r != CUDA_SUCCESS)
        return cfd_fail_cuda(r, "cuCtxGetCurrent");
    if (!ctx)
        return cfd_fail(CUDAFD_E_INVALID, "no CUDA context is current on this thread; make the event's context current");
    /* Reject dead handles up front: cuEventQuery validates the handle. */
    r = cu.cuEventQuery((CUevent)event);
    if (r != CUDA_SUCCESS && r != CUDA_ERROR_NOT_READY && r != CUDA_ERROR_INVALID_HANDLE &&
        r != CUDA_ERROR_INVALID_VALUE && r != CUDA_ERROR_CONTEXT_IS_DESTROYED)
        r = CUDA_SUCCESS; /* a sticky fault: let the wait report it */
    if (r == CUDA_ERROR_INVALID_HANDLE || r == CUDA_ERROR_INVALID_VALUE || r == CUDA_ERROR_CONTEXT_IS_DESTROYED)
        return cfd_fail_cuda(r, "cuEventQuery (is this a live event?)");
    cfd_ctx *cx = ctx_record(ctx, NULL);
    if (!cx)
        return CUDAFD_E_NOMEM;
    if (n->mech == CUDAFD_MECH_HOSTFUNC) {
        /* the waits of one event share a side stream (its key is the event):
         * its wait for the event, record and host function in one piece */
        pthread_mutex_t *order = order_lock(event);
        pthread_mutex_lock(order);
        rc = cfd_hostfunc_watch(n, cx, NULL, 0, (CUevent)event, token);
        pthread_mutex_unlock(order);
    } else {
        /* A side stream waits for the caller's event, then records one of our
         * events: the caller's event may be recorded again or destroyed as
         * soon as this returns. */
        CUstream side = NULL;
        CUevent ev = NULL;
        int side_index = -1;
        cfd_syncpt sp = {NULL, 0, 0};
        rc = cfd_side_stream(&cx->side, event, false, &side, &side_index);
        pthread_mutex_t *order = order_lock((uintptr_t)side);
        pthread_mutex_lock(order);
        if (rc == CUDAFD_OK && (r = cu.cuStreamWaitEvent(side, (CUevent)event, 0)) != CUDA_SUCCESS)
            rc = cfd_fail_cuda(r, "cuStreamWaitEvent on the event");
        bool waits = rc == CUDAFD_OK; /* the side stream waits for the caller's event: released stale on failure */
        if (rc == CUDAFD_OK && n->mech == CUDAFD_MECH_SYNCFD &&
            (rc = cfd_syncfd_signal(cx, side, stream_key((uintptr_t)side), 0, &sp)) == CUDAFD_OK)
            rc = fence_make(&sp, fence_fd);
        if (rc == CUDAFD_OK)
            rc = cfd_record(cx, side, NULL, &ev);
        if (rc == CUDAFD_OK) { /* enqueue takes over the side stream, even when it fails */
            rc = enqueue(n, cx, (uintptr_t)side, 0, ev, side_index, event, &sp, token);
        } else if (side_index >= 0) {
            pthread_mutex_lock(&g.mu);
            cfd_side_release(&cx->side, event, side_index, !waits);
            pthread_mutex_unlock(&g.mu);
        }
        pthread_mutex_unlock(order);
        cfd_syncfd_signal_end(&sp);
        if (rc == CUDAFD_OK)
            return CUDAFD_OK; /* enqueue dropped the record's hold too */
        fence_drop(fence_fd);
    }
    /* The event may be another context's, and its fault that context's: the
     * current context's waits get it only if its own legacy stream reports it. */
    bool ours = rc != CUDAFD_E_CUDA || cu.cuStreamQuery(CU_STREAM_LEGACY) == cudafd_last_cuda_error();
    ctx_unhold(cx, ours ? rc : CUDAFD_OK);
    return rc;
}

/* The fast path before a watch: no lock, no context switch, one driver call.
 * Any answer but CUDA_SUCCESS (busy, a fault, a bad handle, no current
 * context for a default stream) means "watch it": the watch reports errors. */
CFD_API int cudafd_stream_done(uintptr_t stream)
{
    return cfd_driver_ready() == CUDAFD_OK && cu.cuStreamQuery((CUstream)stream) == CUDA_SUCCESS;
}

CFD_API uint64_t cudafd_stream_key(uintptr_t stream)
{
    return cfd_driver_ready() == CUDAFD_OK ? stream_key(stream) : (stream == 1 ? 0 : stream);
}

CFD_API int cudafd_event_done(uintptr_t event)
{
    return event && cfd_driver_ready() == CUDAFD_OK && cu.cuEventQuery((CUevent)event) == CUDA_SUCCESS;
}

CFD_API int cudafd_cancel(cudafd_notifier *n, uint64_t token)
{
    if (!n)
        return cfd_fail(CUDAFD_E_INVALID, "notifier is NULL");
    if (cfd_inherited(n))
        return cfd_inherited_error();
    pthread_mutex_lock(&g.mu);
    cfd_wait *w = cfd_wait_lookup(token);
    int rc = CUDAFD_OK;
    if (n->closed)
        rc = cfd_closed_error();
    else if (!w || w->n != n)
        rc = cfd_fail(CUDAFD_E_UNKNOWN_TOKEN, "token %llu is not pending on this notifier",
                      (unsigned long long)token);
    else if (w->mech == CUDAFD_MECH_HOSTFUNC)
        cfd_hostfunc_drop_locked(w);
    else
        cfd_wait_drop(w); /* the GPU work goes on; the poller lets the wait go (waiters.c) */
    pthread_mutex_unlock(&g.mu);
    return rc;
}
