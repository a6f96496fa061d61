/*
 * contexts.c - one record per CUDA context that cudafd has watched work in:
 * its pool of idle events and its hostfunc side streams.
 *
 * Events are created with CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING:
 * blocking sync lets a waiter sleep in cuEventSynchronize instead of spinning,
 * and no timing keeps a record as cheap as the driver allows. An event goes
 * back to its pool once its wait finished, so steady-state watches create
 * nothing. When no notifier is open, idle pools and side streams are retired
 * so that every count returns to zero.
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
    CUresult r = cu.cuEventCreate(ev, CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING);
    if (r != CUDA_SUCCESS)
        return cfd_fail_cuda(r, "cuEventCreate");
    cfd_count(ST_EVENTS, 1);
    return CUDAFD_OK;
}

void cfd_event_destroy(CUevent ev)
{
    cu.cuEventDestroy(ev); /* an error here (context gone) leaves nothing to free */
    cfd_count(ST_EVENTS, -1);
}

static void retire(cfd_ctx *cx)
{
    for (int i = 0; i < cx->npool; i++)
        cfd_event_destroy(cx->pool[i]);
    cx->npool = 0;
    for (int i = 0; i < CFD_SIDE_STREAMS; i++) {
        if (cx->side[i]) {
            cu.cuStreamDestroy(cx->side[i]);
            cx->side[i] = NULL;
            cfd_count(ST_STREAMS, -1);
        }
    }
}

void cfd_quiesce_locked(void)
{
    if (g.nopen > 0 || g.probing) /* the watchdog may be querying pooled events */
        return;
    for (int i = 0; i < g.ngrave; i++)
        cfd_event_destroy(g.graveyard[i]);
    g.ngrave = 0;
    cfd_ctx **link = &g.contexts;
    while (*link) {
        cfd_ctx *cx = *link;
        retire(cx);
        if (cx->nwaits == 0) {
            *link = cx->next;
            free(cx->pool);
            free(cx);
            cfd_count(ST_CONTEXTS, -1);
        } else {
            link = &cx->next;
        }
    }
    if (!g.contexts) {
        free(g.graveyard);
        g.graveyard = NULL;
        g.capgrave = 0;
    }
}

void cfd_ctx_release(cfd_ctx *cx) { cx->nwaits--; }

void cfd_probe_begin(void) { g.probing++; }

/* Waits that finished during the probe pooled their events instead of
 * destroying them; if the last notifier closed meanwhile, nothing else would
 * retire them, so the probe that held them does. */
void cfd_probe_end(void)
{
    if (--g.probing == 0 && g.nopen == 0)
        cfd_quiesce_locked();
}

int cfd_side_stream(cfd_ctx *cx, uintptr_t key, CUstream *out)
{
    unsigned i = (unsigned)((key * 0x9e3779b97f4a7c15ull) >> 61) % CFD_SIDE_STREAMS;
    pthread_mutex_lock(&g.mu);
    CUstream s = cx->side[i];
    pthread_mutex_unlock(&g.mu);
    if (!s) {
        CUstream fresh = NULL;
        CUresult r = cu.cuStreamCreate(&fresh, CU_STREAM_NON_BLOCKING);
        if (r != CUDA_SUCCESS)
            return cfd_fail_cuda(r, "cuStreamCreate (side stream)");
        cfd_count(ST_STREAMS, 1);
        pthread_mutex_lock(&g.mu);
        if (!cx->side[i]) {
            cx->side[i] = fresh;
            fresh = NULL;
        }
        s = cx->side[i];
        pthread_mutex_unlock(&g.mu);
        if (fresh) { /* another thread won the race */
            cu.cuStreamDestroy(fresh);
            cfd_count(ST_STREAMS, -1);
        }
    }
    *out = s;
    return CUDAFD_OK;
}
