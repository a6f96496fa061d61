/*
 * waits.c - wait records, lanes and the watch/cancel entry points.
 *
 * A wait is one "tell me when the GPU passes this point". Its token packs a
 * slot index and a generation, so a stale token (completed, cancelled, or
 * from another notifier) is recognised and never touches a reused slot. Slots
 * live in chunks that are never freed, so a token carried through the driver
 * (hostfunc user data) always points at valid memory.
 *
 * A lane is the ordered list of waits on one stream (per context, per
 * mechanism; per recording thread for CU_STREAM_PER_THREAD). The driver runs a
 * stream's work in order, so a record completes no later than every record
 * made after it: a waiter only ever needs to watch the head of a lane. Waits
 * on a caller's event get a lane of their own.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "internal.h"

/* ---- slots ---- */

#define CHUNK_BITS 10
#define CHUNK (1u << CHUNK_BITS)
#define MAX_CHUNKS 4096 /* 4M concurrent waits */

static cfd_wait *chunks[MAX_CHUNKS];
static uint32_t nchunks;
static cfd_wait *free_waits;
static uint32_t generation = 1;

static cfd_wait *slot_at(uint32_t slot)
{
    uint32_t c = slot >> CHUNK_BITS;
    return c < nchunks ? &chunks[c][slot & (CHUNK - 1)] : NULL;
}

static cfd_wait *wait_alloc(void)
{
    if (!free_waits) {
        if (nchunks == MAX_CHUNKS)
            return NULL;
        cfd_wait *chunk = calloc(CHUNK, sizeof *chunk);
        if (!chunk)
            return NULL;
        chunks[nchunks] = chunk;
        for (uint32_t i = CHUNK; i-- > 0;) {
            chunk[i].token = (uint64_t)(nchunks * CHUNK + i); /* generation 0: free */
            chunk[i].next = free_waits;
            free_waits = &chunk[i];
        }
        nchunks++;
    }
    cfd_wait *w = free_waits;
    free_waits = w->next;
    uint32_t slot = (uint32_t)(w->token & 0xffffffffu);
    if (++generation == 0)
        generation = 1;
    memset(w, 0, sizeof *w);
    w->token = ((uint64_t)generation << 32) | slot;
    cfd_count(ST_PENDING, 1);
    return w;
}

static void wait_free(cfd_wait *w)
{
    w->token &= 0xffffffffu; /* keep the slot, drop the generation */
    w->next = free_waits;
    free_waits = w;
    cfd_count(ST_PENDING, -1);
}

cfd_wait *cfd_wait_lookup(uint64_t token)
{
    if (token >> 32 == 0)
        return NULL;
    cfd_wait *w = slot_at((uint32_t)(token & 0xffffffffu));
    return (w && w->token == token) ? w : NULL;
}

#define LANE_BUCKETS 4096
static cfd_lane *lane_table[LANE_BUCKETS];

/* ---- notifier attachment ---- */

static void attach(cudafd_notifier *n, cfd_wait *w)
{
    w->n = n;
    w->nprev = NULL;
    w->nnext = n->attached;
    if (n->attached)
        n->attached->nprev = w;
    n->attached = w;
    n->nattached++;
}

static void detach(cfd_wait *w)
{
    cudafd_notifier *n = w->n;
    if (!n)
        return;
    if (w->nprev)
        w->nprev->nnext = w->nnext;
    else
        n->attached = w->nnext;
    if (w->nnext)
        w->nnext->nprev = w->nprev;
    w->nprev = w->nnext = NULL;
    w->n = NULL;
    n->nattached--;
}

void cfd_detach_all(cudafd_notifier *n)
{
    while (n->attached)
        detach(n->attached);
}

/* Report a wait's result to its notifier, if it still has one. */
static void deliver(cfd_wait *w, int64_t status)
{
    if (!w->n)
        return;
    cfd_notifier_push(w->n, w->token, status);
    detach(w);
    cfd_count(ST_COMPLETED, 1);
    if (status != 0)
        cfd_count(ST_FAULTS, 1);
}

/* Errors after which the context can do no more work (the driver's "sticky"
 * errors): every later call on it fails the same way. */
static bool is_sticky(int64_t status)
{
    switch (status) {
    case 214: /* CUDA_ERROR_ECC_UNCORRECTABLE */
    case CUDA_ERROR_ILLEGAL_ADDRESS:
    case CUDA_ERROR_LAUNCH_TIMEOUT:
    case CUDA_ERROR_CONTEXT_IS_DESTROYED:
    case CUDA_ERROR_ASSERT:
    case 714: /* CUDA_ERROR_HARDWARE_STACK_ERROR */
    case CUDA_ERROR_ILLEGAL_INSTRUCTION:
    case CUDA_ERROR_MISALIGNED_ADDRESS:
    case 717: /* CUDA_ERROR_INVALID_ADDRESS_SPACE */
    case CUDA_ERROR_INVALID_PC:
    case CUDA_ERROR_LAUNCH_FAILED:
        return true;
    default:
        return false;
    }
}

/*
 * A sticky fault seen on one wait dooms every wait of that context, but the
 * driver reports it on other streams only once their running kernels end
 * (measured on an H200: a fault beside 3 s kernels on other streams surfaced
 * there after those kernels ran out). So the first sticky error seen in a
 * context is delivered at once to every attached wait of the context; the
 * waits stay in their lanes, detached, until the driver lets them go.
 */
static void fault_sweep(cfd_ctx *cx, int64_t status)
{
    if (cx->fault)
        return;
    cx->fault = status;
    for (size_t b = 0; b < LANE_BUCKETS; b++)
        for (cfd_lane *l = lane_table[b]; l; l = l->hnext)
            if (l->ctx == cx->ctx)
                for (cfd_wait *w = l->head; w; w = w->next)
                    deliver(w, status);
    for (cfd_wait *w = g.hf_pending; w; w = w->next)
        if (w->cx == cx)
            deliver(w, status);
}

void cfd_note_fault(cfd_ctx *cx, int64_t status)
{
    if (is_sticky(status))
        fault_sweep(cx, status);
}

void cfd_wait_complete(cfd_wait *w, int64_t status, bool from_hostfn)
{
    deliver(w, status);
    cfd_note_fault(w->cx, status);
    if (w->owns_ev && w->ev) {
        if ((status == 0 && g.nopen > 0) || from_hostfn || g.probing)
            cfd_ctx_give_event(w->cx, w->ev); /* pooled, or retired later by a quiesce */
        else
            cfd_event_destroy(w->ev);
    }
    cfd_ctx_release(w->cx);
    wait_free(w);
    if (!from_hostfn && g.nopen == 0)
        cfd_quiesce_locked();
}

/* ---- lanes ---- */


static size_t lane_hash(CUcontext ctx, uintptr_t stream, uint64_t thread, int mech)
{
    uint64_t h = (uint64_t)(uintptr_t)ctx * 0x9e3779b97f4a7c15ull;
    h ^= (uint64_t)stream * 0xc2b2ae3d27d4eb4full;
    h ^= thread * 0x165667b19e3779f9ull + (uint64_t)mech;
    return (size_t)((h ^ (h >> 29)) & (LANE_BUCKETS - 1));
}

static cfd_lane *lane_get(CUcontext ctx, uintptr_t stream, uint64_t thread, int mech)
{
    size_t b = lane_hash(ctx, stream, thread, mech);
    for (cfd_lane *l = lane_table[b]; l; l = l->hnext)
        if (l->ctx == ctx && l->stream == stream && l->thread == thread && l->mech == mech)
            return l;
    cfd_lane *l = calloc(1, sizeof *l);
    if (!l)
        return NULL;
    l->ctx = ctx;
    l->stream = stream;
    l->thread = thread;
    l->mech = (uint8_t)mech;
    l->hnext = lane_table[b];
    lane_table[b] = l;
    return l;
}

void cfd_lane_free(cfd_lane *l)
{
    cfd_lane **link = &lane_table[lane_hash(l->ctx, l->stream, l->thread, l->mech)];
    while (*link != l)
        link = &(*link)->hnext;
    *link = l->hnext;
    free(l);
}

/* Complete the head of a lane. The lane's owner (poller or blocker) calls this;
 * an emptied lane is freed here unless it is still linked somewhere. */
void cfd_lane_pop(cfd_lane *l, int64_t status)
{
    cfd_wait *w = l->head;
    l->head = w->next;
    if (!l->head)
        l->tail = NULL;
    l->since = cfd_now_ns();
    cfd_wait_complete(w, status, false);
}

int cfd_lane_release_if_empty(cfd_lane *l)
{
    if (l->head || l->polling || l->queued || l->state == LANE_SPIN || l->state == LANE_SLOW)
        return 0;
    cfd_lane_free(l);
    return 1;
}

/* ---- watch ---- */

static int check_notifier(cudafd_notifier *n)
{
    if (!n)
        return cfd_fail(CUDAFD_E_INVALID, "notifier is NULL");
    int rc = cfd_driver_ready();
    if (rc != CUDAFD_OK)
        return rc;
    return CUDAFD_OK;
}

/* Make ctx current on this thread if it is not; *pushed tells whether to pop. */
static int enter_ctx(CUcontext ctx, bool *pushed)
{
    CUcontext cur = NULL;
    *pushed = false;
    CUresult r = cu.cuCtxGetCurrent(&cur);
    if (r != CUDA_SUCCESS)
        return cfd_fail_cuda(r, "cuCtxGetCurrent");
    if (cur == ctx)
        return CUDAFD_OK;
    r = cu.cuCtxPushCurrent(ctx);
    if (r != CUDA_SUCCESS)
        return cfd_fail_cuda(r, "cuCtxPushCurrent");
    *pushed = true;
    return CUDAFD_OK;
}

static void leave_ctx(bool pushed)
{
    CUcontext ignored;
    if (pushed)
        cu.cuCtxPopCurrent(&ignored);
}

/* Record a pooled event at the stream's current end. Context current.
 * `taken`: an event the caller already took from the pool, or NULL. */
int cfd_record(cfd_ctx *cx, CUstream stream, CUevent taken, CUevent *out)
{
    CUevent ev = taken;
    if (!ev) {
        pthread_mutex_lock(&g.mu);
        ev = cfd_ctx_take_event(cx);
        pthread_mutex_unlock(&g.mu);
    }
    bool pooled = ev != NULL;
    for (int attempt = 0; attempt < 2; attempt++) {
        if (!ev) {
            int rc = cfd_event_create(&ev);
            if (rc != CUDAFD_OK)
                return rc;
        }
        CUresult r = cu.cuEventRecord(ev, stream);
        if (r == CUDA_SUCCESS) {
            *out = ev;
            return CUDAFD_OK;
        }
        cfd_event_destroy(ev);
        ev = NULL;
        /* A pooled event can be stale when its context was destroyed and a new
         * one took its address: retry once with a fresh event. */
        if (!(pooled && attempt == 0 && r == CUDA_ERROR_INVALID_HANDLE))
            return cfd_fail_cuda(r, "cuEventRecord on the stream");
    }
    return cfd_fail(CUDAFD_E_CUDA, "cuEventRecord failed");
}

static uint64_t this_thread(void) { return (uint64_t)syscall(SYS_gettid); }

cfd_wait *cfd_wait_new(cudafd_notifier *n, cfd_ctx *cx, CUevent ev)
{
    cfd_wait *w = wait_alloc();
    if (!w)
        return NULL;
    w->ev = ev;
    w->owns_ev = true;
    w->cx = cx;
    cx->nwaits++;
    w->mech = (uint8_t)n->mech;
    w->t0 = cfd_now_ns();
    attach(n, w);
    return w;
}

void cfd_wait_discard(cfd_wait *w)
{
    detach(w);
    cfd_ctx_give_event(w->cx, w->ev);
    cfd_ctx_release(w->cx);
    wait_free(w);
}

/* Queue a wait for a recorded pooled event on the lane of (ctx, stream). */
static int enqueue(cudafd_notifier *n, cfd_ctx *cx, uintptr_t stream, uint64_t thread, CUevent ev,
                   uint64_t *token)
{
    pthread_mutex_lock(&g.mu);
    int rc = CUDAFD_OK;
    cfd_lane *l = NULL;
    cfd_wait *w = NULL;
    if (n->closed)
        rc = cfd_fail(CUDAFD_E_CLOSED, "the notifier is closed");
    else if (!(l = lane_get(cx->ctx, stream, thread, n->mech)) || !(w = cfd_wait_new(n, cx, ev)))
        rc = cfd_fail(CUDAFD_E_NOMEM, "out of memory for a wait");
    if (rc == CUDAFD_OK) {
        w->lane = l;
        bool was_empty = !l->head;
        if (l->tail)
            l->tail->next = w;
        else
            l->head = w;
        l->tail = w;
        if (was_empty)
            l->since = w->t0;
        if (was_empty && !l->state && (rc = cfd_lane_activate(l)) != CUDAFD_OK) {
            l->head = l->tail = NULL;
            cfd_wait_discard(w);
            w = NULL;
        }
    } else if (!w) {
        cfd_ctx_give_event(cx, ev);
    }
    if (rc != CUDAFD_OK && l && !l->head && !l->state && !l->queued)
        cfd_lane_free(l);
    if (rc == CUDAFD_OK) {
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
    }
    pthread_mutex_unlock(&g.mu);
    if (!cx)
        cfd_fail(CUDAFD_E_NOMEM, "out of memory for a context record");
    return cx;
}

static void ctx_unhold(cfd_ctx *cx)
{
    pthread_mutex_lock(&g.mu);
    cfd_ctx_release(cx);
    if (g.nopen == 0)
        cfd_quiesce_locked();
    pthread_mutex_unlock(&g.mu);
}

CFD_API int cudafd_watch_stream(cudafd_notifier *n, uintptr_t stream, uint64_t *token)
{
    int rc = check_notifier(n);
    if (rc != CUDAFD_OK)
        return rc;
    if (!token)
        return cfd_fail(CUDAFD_E_INVALID, "token is NULL");
    if (__atomic_load_n(&n->closed, __ATOMIC_ACQUIRE))
        return cfd_fail(CUDAFD_E_CLOSED, "the notifier is closed");
    CUcontext ctx = NULL;
    CUresult r = cu.cuStreamGetCtx((CUstream)stream, &ctx);
    if (r != CUDA_SUCCESS)
        return cfd_fail_cuda(r, "cuStreamGetCtx (is this a live stream?)");
    bool pushed;
    rc = enter_ctx(ctx, &pushed);
    if (rc != CUDAFD_OK)
        return rc;
    bool hostfunc = n->mech == CUDAFD_MECH_HOSTFUNC;
    CUevent taken = NULL;
    cfd_ctx *cx = ctx_record(ctx, hostfunc ? NULL : &taken);
    if (!cx) {
        leave_ctx(pushed);
        return CUDAFD_E_NOMEM;
    }
    uint64_t thread = (CUstream)stream == CU_STREAM_PER_THREAD ? this_thread() : 0;
    if (hostfunc) {
        rc = cfd_hostfunc_watch(n, cx, (CUstream)stream, NULL, token);
    } else {
        CUevent ev = NULL;
        rc = cfd_record(cx, (CUstream)stream, taken, &ev);
        if (rc == CUDAFD_OK) {
            rc = enqueue(n, cx, stream == 1 ? 0 : stream, thread, ev, token);
            if (rc == CUDAFD_OK) { /* the common path: two critical sections in all */
                leave_ctx(pushed);
                return rc;
            }
        }
    }
    leave_ctx(pushed);
    if (rc == CUDAFD_E_CUDA) {
        pthread_mutex_lock(&g.mu);
        cfd_note_fault(cx, cudafd_last_cuda_error());
        pthread_mutex_unlock(&g.mu);
    }
    ctx_unhold(cx);
    return rc;
}

CFD_API int cudafd_watch_event(cudafd_notifier *n, uintptr_t event, uint64_t *token)
{
    int rc = check_notifier(n);
    if (rc != CUDAFD_OK)
        return rc;
    if (!token || !event)
        return cfd_fail(CUDAFD_E_INVALID, "%s is NULL", token ? "event" : "token");
    if (__atomic_load_n(&n->closed, __ATOMIC_ACQUIRE))
        return cfd_fail(CUDAFD_E_CLOSED, "the notifier is closed");
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
        rc = cfd_hostfunc_watch(n, cx, NULL, (CUevent)event, token);
    } else {
        /* A side stream waits for the caller's event, then records one of our
         * blocking-sync events: waiters then never spin inside the driver on
         * a caller's spin-sync event, and the caller's event may be recorded
         * again or destroyed as soon as this returns. */
        CUstream side = NULL;
        CUevent ev = NULL;
        rc = cfd_side_stream(cx, event, &side);
        if (rc == CUDAFD_OK && (r = cu.cuStreamWaitEvent(side, (CUevent)event, 0)) != CUDA_SUCCESS)
            rc = cfd_fail_cuda(r, "cuStreamWaitEvent on the event");
        if (rc == CUDAFD_OK)
            rc = cfd_record(cx, side, NULL, &ev);
        if (rc == CUDAFD_OK && (rc = enqueue(n, cx, (uintptr_t)side, 0, ev, token)) == CUDAFD_OK)
            return rc; /* enqueue dropped the hold */
    }
    ctx_unhold(cx);
    return rc;
}

/* The fast path before a watch: no lock, no context switch, one driver call.
 * Any answer but CUDA_SUCCESS (busy, a fault, a bad handle, no current
 * context for a default stream) means "watch it": the watch reports errors. */
CFD_API int cudafd_stream_done(uintptr_t stream)
{
    return cfd_driver_ready() == CUDAFD_OK && cu.cuStreamQuery((CUstream)stream) == CUDA_SUCCESS;
}

CFD_API int cudafd_event_done(uintptr_t event)
{
    return event && cfd_driver_ready() == CUDAFD_OK && cu.cuEventQuery((CUevent)event) == CUDA_SUCCESS;
}

CFD_API int cudafd_cancel(cudafd_notifier *n, uint64_t token)
{
    if (!n)
        return cfd_fail(CUDAFD_E_INVALID, "notifier is NULL");
    pthread_mutex_lock(&g.mu);
    cfd_wait *w = cfd_wait_lookup(token);
    int rc = CUDAFD_OK;
    if (!w || w->n != n)
        rc = cfd_fail(CUDAFD_E_UNKNOWN_TOKEN, "token %llu is not pending on this notifier",
                      (unsigned long long)token);
    else
        detach(w);
    pthread_mutex_unlock(&g.mu);
    return rc;
}
