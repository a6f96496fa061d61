/*
 * contexts.c - one record per CUDA context that cudafd has watched work in:
 * its pool of idle events and its pool of side streams (hostfunc points,
 * waits on a caller's event).
 *
 * Stream creation can stall everything: on an H200, now and then (about
 * every 128th stream of a process) cuStreamCreate blocks until the device
 * has no work in flight, and meanwhile every call into the context, from any
 * thread, blocks behind it: the caller's event loop for as long as the queued
 * work lasts (bench/hostfunc_stall.py, on an H200). The hostfunc mechanism
 * takes a side stream for each stream it watches at once, so its first watch
 * in a context makes all CFD_SIDE_MAX side streams: at most one such stall,
 * at the start, instead of at any later watch under load. Waits on a
 * caller's event use few and make theirs when needed: filling those pools at
 * a first watch cost a
 * one-shot fence 32 stream creations, and as many chances of that stall. A
 * caller that wants none made under load makes them all before its work
 * starts (cudafd_prepare).
 *
 * Side streams outlive the last notifier: made once per context, they are
 * kept until the process exits (or cudafd_release_idle), so a one-shot fence
 * after the first makes none. Retiring them with the last notifier, as event
 * pools are, made every 4th one-shot hostfunc fence cross a 128-stream
 * boundary, which held its caller until the GPU was idle (4.0 s seen). The
 * other choice, a fence that makes only the one side stream it needs, still
 * creates a stream per fence, and so stalls every 128th.
 *
 * A record in a device's primary context (what PyTorch, CuPy and numba use)
 * holds a reference to that context (cuDevicePrimaryCtxRetain, taken when the
 * record is made, released when it is freed), so a caller that releases the
 * primary context while a notifier is open, or while side streams are kept,
 * does not destroy it under cudafd's events and streams: their handles would
 * be dead, and cuEventRecord, cuEventQuery and cuEventDestroy of an event of
 * a destroyed context each crashed the process (SIGSEGV, an H100 with driver
 * 580, bench/ctx_reuse.py). The reference also keeps the context's handle
 * meaning that context: a primary context retained again after its last
 * release destroyed it has the old one's handle and a new cuCtxGetId (the
 * same probe), so a pool kept past that would hand the new context the old
 * one's dead events. A context the caller created and destroys itself cannot
 * be kept alive so: its waits end (or are dropped) and cudafd_release_idle
 * frees its record first (cfd_release_unused_locked; cudafd.h says so). A
 * kept pool's next use still asks the driver about one of its streams
 * (cuStreamQuery) and drops them all if it does not know it, which is what
 * the simulator answers for a dead handle.
 *
 * Pool events are created with CU_EVENT_DISABLE_TIMING only: no timing keeps
 * a record as cheap as the driver allows, and they are not blocking-sync,
 * because the driver lets only about 56 blocking-sync records be pending on a
 * stream before the next one blocks the caller until the GPU catches up
 * (measured on an H200: bench/c/enqueue_cost.c); plain ones
 * never did. And a record with timing or blocking-sync holds the hardware
 * queue its stream shares with others until the work before it ends, so
 * streams sharing a queue would run in turn; a plain record does not
 * (bench/c/query_cost.c --hold). An event goes back to its pool once its
 * wait finished, so steady-state watches create nothing. When no notifier is open, idle pools
 * are retired; side streams stay for the next notifier until
 * cudafd_release_idle.
 */
#include <stdlib.h>

#include "internal.h"

cfd_ctx *cfd_ctx_get(CUcontext ctx)
{
    for (cfd_ctx *cx = g.contexts; cx; cx = cx->next)
        if (cx->ctx == ctx)
            return cx;
    cfd_ctx *cx = calloc(1, sizeof *cx);
    if (!cx)
        return NULL;
    cx->ctx = ctx;
    cx->next = g.contexts;
    g.contexts = cx;
    cfd_count(ST_CONTEXTS, 1);
    return cx;
}

CUevent cfd_ctx_take_event(cfd_ctx *cx) { return cx->npool ? cx->pool[--cx->npool] : NULL; }

static void park_for_destruction(CUevent ev)
{
    if (g.ngrave == g.capgrave) {
        int cap = g.capgrave ? 2 * g.capgrave : 16;
        CUevent *grown = realloc(g.graveyard, (size_t)cap * sizeof *grown);
        if (!grown)
            return; /* leak one event rather than call the driver here */
        g.graveyard = grown;
        g.capgrave = cap;
    }
    g.graveyard[g.ngrave++] = ev;
}

void cfd_ctx_give_event(cfd_ctx *cx, CUevent ev)
{
    if (cx->npool == cx->cappool) {
        int cap = cx->cappool ? 2 * cx->cappool : 8;
        CUevent *grown = realloc(cx->pool, (size_t)cap * sizeof *grown);
        if (!grown) {
            park_for_destruction(ev);
            return;
        }
        cx->pool = grown;
        cx->cappool = cap;
    }
    cx->pool[cx->npool++] = ev;
}

int cfd_event_create(CUevent *ev)
{
    CUresult r = cu.cuEventCreate(ev, CU_EVENT_DISABLE_TIMING);
    if (r != CUDA_SUCCESS)
        return cfd_fail_cuda(r, "cuEventCreate");
    cfd_count(ST_EVENTS, 1);
    return CUDAFD_OK;
}

void cfd_event_destroy(CUevent ev)
{
    cu.cuEventDestroy(ev); /* its context is alive: a dead event would crash the driver (file comment) */
    cfd_count(ST_EVENTS, -1);
}

/* Destroy the pool's idle side streams. A stream someone holds (a watch
 * setting up, which uses it without g.mu; a wait in flight on it) stays,
 * and so does a pool being filled: their holder releases them (or finishes
 * the fill) and then quiesces again, since each of those paths ends in
 * cfd_quiesce_locked once no notifier is open (ctx_unhold, cfd_wait_complete,
 * the watchdog's bury_parked_events). */
static bool has_streams(const cfd_side_pool *p)
{
    for (int i = 0; i < CFD_SIDE_MAX; i++)
        if (p->stream[i])
            return true;
    return p->filling;
}

static void retire_streams(cfd_side_pool *p)
{
    if (p->filling)
        return;
    for (int i = 0; i < CFD_SIDE_MAX; i++) {
        if (p->stream[i] && p->busy[i] == 0) {
            cu.cuStreamDestroy(p->stream[i]);
            p->stream[i] = NULL;
            p->stale[i] = false;
            p->filled = false;
            cfd_count(ST_STREAMS, -1);
        }
    }
}

/* A new record (its context current, g.mu held and released meanwhile, the
 * record held): if the context is its device's primary one, hold a reference
 * to it for as long as the record lives (file comment). */
void cfd_ctx_hold_primary_locked(cfd_ctx *cx)
{
    if (cx->primary != 0)
        return;
    if (!cu.cuDevicePrimaryCtxGetState || !cu.cuDevicePrimaryCtxRetain || !cu.cuDevicePrimaryCtxRelease) {
        cx->primary = 3;
        return;
    }
    cx->primary = 1;
    pthread_mutex_unlock(&g.mu);
    int8_t found = 3;
    CUdevice dev = 0;
    CUcontext cur = NULL, primary = NULL;
    unsigned int flags = 0;
    int active = 0;
    /* only an active primary context is retained: retaining an inactive one would create it */
    if (cu.cuCtxGetCurrent(&cur) == CUDA_SUCCESS && cur && cu.cuCtxGetDevice(&dev) == CUDA_SUCCESS &&
        cu.cuDevicePrimaryCtxGetState(dev, &flags, &active) == CUDA_SUCCESS && active &&
        cu.cuDevicePrimaryCtxRetain(&primary, dev) == CUDA_SUCCESS) {
        if (primary == cur)
            found = 2;
        else
            cu.cuDevicePrimaryCtxRelease(dev);
    }
    pthread_mutex_lock(&g.mu);
    cx->pdev = dev;
    cx->primary = found;
}

/* Idle events go; side streams are kept for the next notifier. */
static void retire(cfd_ctx *cx)
{
    for (int i = 0; i < cx->npool; i++)
        cfd_event_destroy(cx->pool[i]);
    cx->npool = 0;
    if (has_streams(&cx->side))
        cx->side.kept = true;
}

/* Retire the idle events of each record (of those no wait refers to, if
 * `unused_only`) and free the records left with no waits, no streams and no
 * syncfd records (whose semaphores die with the context), dropping their
 * references to primary contexts. */
static void retire_records(bool unused_only)
{
    cfd_ctx **link = &g.contexts;
    while (*link) {
        cfd_ctx *cx = *link;
        if (!unused_only || cx->nwaits == 0)
            retire(cx);
        if (cx->nwaits == 0 && !has_streams(&cx->side) && __atomic_load_n(&cx->syncrecs, __ATOMIC_RELAXED) == 0) {
            if (cx->primary == 2)
                cu.cuDevicePrimaryCtxRelease(cx->pdev);
            *link = cx->next;
            free(cx->pool);
            free(cx->side.keys);
            free(cx);
            cfd_count(ST_CONTEXTS, -1);
        } else {
            link = &cx->next;
        }
    }
}

/* The events parked by the driver's callback thread (park_for_destruction:
 * a pool that could not grow), of any context. */
static void bury_graveyard(void)
{
    for (int i = 0; i < g.ngrave; i++)
        cfd_event_destroy(g.graveyard[i]);
    g.ngrave = 0;
}

void cfd_release_unused_locked(void)
{
    if (g.probing)
        return;
    bury_graveyard();
    for (cfd_ctx *cx = g.contexts; cx; cx = cx->next)
        if (cx->nwaits == 0)
            retire_streams(&cx->side);
    retire_records(true);
}

void cfd_quiesce_locked(void)
{
    if (g.nopen > 0 || g.probing) /* the watchdog may be querying pooled events */
        return;
    bury_graveyard();
    retire_records(false);
    if (!g.contexts) {
        free(g.graveyard);
        g.graveyard = NULL;
        g.capgrave = 0;
    }
}

void cfd_ctx_release(cfd_ctx *cx) { cx->nwaits--; }

/* Every idle side stream of every context goes (g.mu held, no notifier open). */
void cfd_retire_side_streams_locked(void)
{
    for (cfd_ctx *cx = g.contexts; cx; cx = cx->next)
        retire_streams(&cx->side);
}

/* The first use of a kept pool: if its context is gone (destroyed while no
 * notifier was open), so are its streams; forget them. g.mu held, released
 * around the query (the pool is marked filling meanwhile, so others wait). */
static void check_kept_locked(cfd_side_pool *p)
{
    p->kept = false;
    CUstream probe = NULL;
    for (int i = 0; i < CFD_SIDE_MAX && !probe; i++)
        probe = p->stream[i];
    if (!probe || p->filling)
        return;
    p->filling = true;
    pthread_mutex_unlock(&g.mu);
    CUresult r = cu.cuStreamQuery(probe);
    pthread_mutex_lock(&g.mu);
    if (r == CUDA_ERROR_INVALID_HANDLE || r == CUDA_ERROR_CONTEXT_IS_DESTROYED || r == CUDA_ERROR_INVALID_CONTEXT) {
        for (int i = 0; i < CFD_SIDE_MAX; i++) {
            if (p->stream[i] && p->busy[i] == 0) {
                p->stream[i] = NULL; /* destroyed with its context */
                p->stale[i] = false;
                cfd_count(ST_STREAMS, -1);
            }
        }
        p->filled = false;
    }
    p->filling = false;
    pthread_cond_broadcast(&g.fill_cv);
}

void cfd_probe_begin(void) { g.probing++; }

/* Waits that finished during the probe pooled their events instead of
 * destroying them; if the last notifier closed meanwhile, nothing else would
 * retire them, so the probe that held them does. */
void cfd_probe_end(void)
{
    if (--g.probing > 0)
        return;
    if (g.nopen == 0)
        cfd_quiesce_locked();
    pthread_cond_broadcast(&g.poller_gone_cv); /* cudafd_release_idle waits for no probe */
}

/*
 * A stream runs in order, so a side stream still waiting for the point a
 * holder queued there (cuStreamWaitEvent on a caller's event, or on an event
 * of a caller's stream) holds up all that is queued on it after, though its
 * holder let go of it: a cancelled wait on 3 s of work would hold a later
 * wait on a complete event 3 s. Such a release marks the slot stale, and a
 * stale slot is taken last of the idle ones: an idle one that is not stale,
 * else an empty slot (a new stream), else an idle stale one, whose stream
 * cfd_side_stream destroys (the driver frees it once its work is done) and
 * makes again, else the least busy one that is not stale, else the least
 * busy. So no stream is made while an idle one that is not stale is left,
 * and no wait is queued behind a stale point while another slot can take it.
 * An idle stale one is not made again while a probe runs (`renew` false): a
 * hostfunc launch is one, and its wait, which held the stream, may have
 * ended meanwhile (hostfunc.c).
 */
static int pick_side(const cfd_side_pool *p, bool renew)
{
    for (int i = 0; i < CFD_SIDE_MAX; i++)
        if (p->stream[i] && p->busy[i] == 0 && !p->stale[i])
            return i;
    for (int i = 0; i < CFD_SIDE_MAX; i++)
        if (!p->stream[i] && p->busy[i] == 0)
            return i;
    for (int i = 0; i < CFD_SIDE_MAX && renew; i++)
        if (p->busy[i] == 0)
            return i; /* stale */
    int best = -1;
    for (int i = 0; i < CFD_SIDE_MAX; i++)
        if (!p->stale[i] && (best < 0 || p->busy[i] < p->busy[best]))
            best = i;
    if (best >= 0)
        return best;
    best = 0;
    for (int i = 1; i < CFD_SIDE_MAX; i++)
        if (p->busy[i] < p->busy[best])
            best = i;
    return best;
}

/* Reserve a side stream index for one holder of key; -1 when out of memory. */
static int hold_side(cfd_side_pool *p, uintptr_t key)
{
    cfd_side_key *e = NULL;
    for (int k = 0; k < p->nkeys && !e; k++)
        if (p->keys[k].key == key)
            e = &p->keys[k];
    if (!e) {
        if (p->nkeys == p->capkeys) {
            int cap = p->capkeys ? 2 * p->capkeys : 8;
            cfd_side_key *grown = realloc(p->keys, (size_t)cap * sizeof *grown);
            if (!grown)
                return -1;
            p->keys = grown;
            p->capkeys = cap;
        }
        e = &p->keys[p->nkeys++];
        *e = (cfd_side_key){key, pick_side(p, !g.probing), 0};
    }
    e->inflight++;
    p->busy[e->side]++;
    return e->side;
}

void cfd_side_release(cfd_side_pool *p, uintptr_t key, int index, bool passed)
{
    p->busy[index]--;
    if (!passed)
        p->stale[index] = true; /* cleared when its stream is destroyed */
    for (int k = 0; k < p->nkeys; k++)
        if (p->keys[k].key == key) {
            if (--p->keys[k].inflight == 0)
                p->keys[k] = p->keys[--p->nkeys];
            return;
        }
}

void cfd_side_fill_locked(cfd_side_pool *p, int count)
{
    if (p->filling) { /* so that no caller goes on to make streams of its own meanwhile */
        while (p->filling)
            pthread_cond_wait(&g.fill_cv, &g.mu);
        return;
    }
    CUstream made[CFD_SIDE_MAX];
    int want = 0, n = 0;
    p->filled = p->filling = true;
    for (int i = 0; i < count && i < CFD_SIDE_MAX; i++)
        want += !p->stream[i];
    pthread_mutex_unlock(&g.mu);
    for (; n < want; n++) {
        if (cu.cuStreamCreate(&made[n], CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS)
            break; /* the slots left empty are made when needed */
        cfd_count(ST_STREAMS, 1);
    }
    pthread_mutex_lock(&g.mu);
    for (int i = 0; i < CFD_SIDE_MAX && n > 0; i++)
        if (!p->stream[i])
            p->stream[i] = made[--n];
    while (n > 0) {
        cu.cuStreamDestroy(made[--n]);
        cfd_count(ST_STREAMS, -1);
    }
    p->filling = false;
    pthread_cond_broadcast(&g.fill_cv);
}

int cfd_side_stream(cfd_side_pool *p, uintptr_t key, bool fill, CUstream *out, int *index)
{
    pthread_mutex_lock(&g.mu);
    if (p->kept)
        check_kept_locked(p);
    if ((fill && !p->filled) || p->filling)
        cfd_side_fill_locked(p, CFD_SIDE_MAX);
    int i = hold_side(p, key);
    CUstream s = i >= 0 ? p->stream[i] : NULL;
    CUstream old = NULL;
    if (s && p->stale[i] && p->busy[i] == 1 && !g.probing) { /* an idle stale one (pick_side): made again */
        old = s;
        s = p->stream[i] = NULL;
        p->stale[i] = false;
    }
    pthread_mutex_unlock(&g.mu);
    if (i < 0)
        return cfd_fail(CUDAFD_E_NOMEM, "out of memory for a side stream record");
    if (old) { /* its pending work, if any, still runs; the driver frees the stream after */
        cu.cuStreamDestroy(old);
        cfd_count(ST_STREAMS, -1);
    }
    if (!s) {
        CUstream fresh = NULL;
        CUresult r = cu.cuStreamCreate(&fresh, CU_STREAM_NON_BLOCKING);
        if (r != CUDA_SUCCESS) {
            pthread_mutex_lock(&g.mu);
            cfd_side_release(p, key, i, true);
            pthread_mutex_unlock(&g.mu);
            return cfd_fail_cuda(r, "cuStreamCreate (side stream)");
        }
        cfd_count(ST_STREAMS, 1);
        pthread_mutex_lock(&g.mu);
        if (!p->stream[i]) {
            p->stream[i] = fresh;
            fresh = NULL;
        }
        s = p->stream[i];
        pthread_mutex_unlock(&g.mu);
        if (fresh) { /* another holder of a key sharing this slot made it first */
            cu.cuStreamDestroy(fresh);
            cfd_count(ST_STREAMS, -1);
        }
    }
    *out = s;
    *index = i;
    return CUDAFD_OK;
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
    if (!ev) {
        int rc = cfd_event_create(&ev);
        if (rc != CUDAFD_OK)
            return rc;
    }
    CUresult r = cu.cuEventRecord(ev, stream);
    if (r != CUDA_SUCCESS) { /* still idle: back to the pool (a probe may be querying it: never destroyed here) */
        pthread_mutex_lock(&g.mu);
        cfd_ctx_give_event(cx, ev);
        pthread_mutex_unlock(&g.mu);
        return cfd_fail_cuda(r, "cuEventRecord on the stream");
    }
    *out = ev;
    return CUDAFD_OK;
}
