/*
 * waits.c - wait records and lanes.
 *
 * The entry points a caller runs (watch, cancel, the "already done" queries)
 * are in watch.c.
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

#include "internal.h"

/* ---- slots ---- */

#define CHUNK_BITS 10
#define CHUNK (1u << CHUNK_BITS)
#define MAX_CHUNKS 4096 /* 4M concurrent waits */
/* A token is generation << SLOT_BITS | slot, nonzero and below 2^63: it fits
 * a signed 64-bit integer, and the Python layer numbers the waits it reports
 * itself from 2^63 up (cudafd/_core/notifier.py). The generation counts every
 * wait made in the process, in the 41 bits between the slot and the top bit,
 * so a token names its wait until 2^41 (2.2e12) more waits have been made:
 * 25 days at a million waits a second. It then starts again at 1 (0 marks a
 * free slot); native/tests/token_wrap.c makes waits across that. */
#define SLOT_BITS 22
#define SLOT_MASK ((1u << SLOT_BITS) - 1)
#define GEN_MAX ((UINT64_C(1) << (63 - SLOT_BITS)) - 1)
_Static_assert((uint64_t)MAX_CHUNKS * CHUNK <= (uint64_t)1 << SLOT_BITS, "a slot index fits its field");

static cfd_wait *chunks[MAX_CHUNKS];
static uint32_t nchunks;
static cfd_wait *free_waits;
static uint64_t generation = 1;

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
    uint32_t slot = (uint32_t)(w->token & SLOT_MASK);
    if (++generation > GEN_MAX)
        generation = 1;
    memset(w, 0, sizeof *w);
    w->token = generation << SLOT_BITS | slot;
    cfd_count(ST_PENDING, 1);
    return w;
}

static void wait_free(cfd_wait *w)
{
    w->token &= SLOT_MASK; /* keep the slot, drop the generation */
    w->next = free_waits;
    free_waits = w;
    cfd_count(ST_PENDING, -1);
}

cfd_wait *cfd_wait_lookup(uint64_t token)
{
    if (token >> SLOT_BITS == 0)
        return NULL;
    cfd_wait *w = slot_at((uint32_t)(token & SLOT_MASK));
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

void cfd_wait_detach(cfd_wait *w)
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

void cfd_wait_drop(cfd_wait *w)
{
    cfd_wait_detach(w);
    if (w->lane) { /* a lane's waits are the poller's to take out (waiters.c) */
        w->dropped = true;
        g.reap_due = true;
    }
}

void cfd_detach_all(cudafd_notifier *n)
{
    while (n->attached)
        cfd_wait_drop(n->attached);
}

void cfd_drop_detached_locked(void)
{
    for (size_t b = 0; b < LANE_BUCKETS; b++)
        for (cfd_lane *l = lane_table[b]; l; l = l->hnext)
            for (cfd_wait *w = l->head; w; w = w->next)
                if (!w->n && !w->dropped)
                    w->dropped = g.reap_due = true;
}

/* Report a wait's result to its notifier, if it still has one. */
static void deliver(cfd_wait *w, int64_t status)
{
    if (!w->n)
        return;
    cfd_count(ST_COMPLETED, 1); /* counted before the push: a caller that drained it sees it counted */
    if (status != 0)
        cfd_count(ST_FAULTS, 1);
    cfd_notifier_push(w->n, w->token, status);
    w->delivered = true;
    cfd_wait_detach(w);
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
 * A sticky fault seen on one wait dooms every wait of that context, whether
 * or not its own work had finished: after a fault every query in the context
 * reports the sticky error (bench/fault_bystanders.py on an H200), so a wait
 * not yet reported done when the fault was seen raises it. The first sticky
 * error seen in a context is delivered at once to every attached wait of the
 * context (a hostfunc wait whose host function never runs included); the
 * waits stay in their lanes, or in the hostfunc list, detached, until the
 * poller or the watchdog lets them go, or cudafd_release_idle does.
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

bool cfd_wait_take(cfd_wait *w, int64_t status)
{
    if (!w->n)
        return false;
    cfd_count(ST_COMPLETED, 1);
    if (status != 0)
        cfd_count(ST_FAULTS, 1);
    cfd_wait_detach(w);
    cfd_note_fault(w->cx, status);
    w->over = true; /* its side stream, if any, is past it (reap_dropped releases it so) */
    return true;
}

void cfd_wait_complete(cfd_wait *w, int64_t status, bool passed, bool from_hostfn)
{
    deliver(w, status);
    cfd_note_fault(w->cx, status);
    if (w->side >= 0)
        cfd_side_release(&w->cx->side, w->side_key, w->side, passed);
    if (w->sp.rec)
        cfd_syncfd_hold_locked(w->sp.rec, -1);
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

cfd_lane *cfd_lane_get(CUcontext ctx, uintptr_t stream, uint64_t thread, int mech)
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

/* Complete the head of a lane (the poller, its owner, calls this). */
void cfd_lane_pop(cfd_lane *l, int64_t status)
{
    cfd_wait *w = l->head;
    l->head = w->next;
    if (!l->head)
        l->tail = NULL;
    l->since = cfd_now_ns();
    cfd_wait_complete(w, status, status != CUDA_ERROR_NOT_READY || w->over, false);
}

/* ---- wait records of a notifier ---- */

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
    w->side = -1;
    w->t0 = cfd_now_ns();
    w->budget = n->max_lateness;
    attach(n, w);
    return w;
}

void cfd_wait_discard(cfd_wait *w, bool passed)
{
    cfd_wait_detach(w);
    if (w->side >= 0)
        cfd_side_release(&w->cx->side, w->side_key, w->side, passed);
    if (w->sp.rec)
        cfd_syncfd_hold_locked(w->sp.rec, -1);
    cfd_ctx_give_event(w->cx, w->ev);
    cfd_ctx_release(w->cx);
    wait_free(w);
}
