/*
 * sim_device.c - devices, contexts, each thread's current-context stack and
 * primary contexts.
 *
 * Facts this code relies on:
 *  - The current-context stack is thread-local and holds context handles, not
 *    pointers: a context destroyed while current elsewhere is looked up again
 *    on every use and reported as CUDA_ERROR_CONTEXT_IS_DESTROYED.
 *  - Like the driver, destroying a context pops it if it is on top of the
 *    calling thread's stack; cuCtxSetCurrent(NULL) pops the top.
 *  - A context owns its streams (default, per-thread, user, draining) and its
 *    events through intrusive lists; destroying it kills them all, which
 *    drops their queued work and wakes every blocked synchronisation.
 *  - A fault is sticky: set once, never cleared; queued work is dropped at
 *    that moment (records never complete), but host functions already
 *    queued run at once, as on an H200; launches after it are refused.
 *  - A faulting kernel ends every context of the process, as on two H200s
 *    of one host, where every call on the other GPU's context reported the
 *    fault too (docs/guide.md, "Faults"). Here that is every context alive
 *    at the fault; one made later is healthy (on a GPU it would fail too),
 *    so that one process can run many fault tests.
 *    $CUDAFD_SIM_FAULT_SCOPE=context keeps a fault to its own context, for
 *    a test that goes on in other contexts after one faulted (the core's
 *    stress test).
 *  - A primary context exists while retained; its last release destroys it.
 *    Retained again, the new one has the old one's handle (sim_handles.c)
 *    and a new cuCtxGetId: the id, not the handle, tells contexts apart.
 */
#include <stdio.h>
#include <stdlib.h>

#include "sim_internal.h"

static _Thread_local uint64_t tls_stack[SIM_CTX_STACK_MAX];
static _Thread_local int tls_depth;
static _Thread_local uint64_t tls_id;
static atomic_uint_fast64_t next_tid = 1;

uint64_t sim_thread_id(void)
{
    if (!tls_id)
        tls_id = atomic_fetch_add(&next_tid, 1);
    return tls_id;
}

static CUresult check_device(CUdevice dev)
{
    return dev >= 0 && dev < sim.ndev ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
}

static CUcontext to_handle(const struct sim_ctx *c)
{
    return (CUcontext)(uintptr_t)c->handle;
}

/* ---- context objects ---- */

CUresult sim_ctx_lookup_locked(CUcontext h, struct sim_ctx **out)
{
    uint64_t id = (uint64_t)(uintptr_t)h;
    struct sim_ctx *c = sim_handle_get(id, SIM_T_CTX);
    if (!c)
        return sim_handle_was(id, SIM_T_CTX) ? CUDA_ERROR_CONTEXT_IS_DESTROYED
                                             : CUDA_ERROR_INVALID_CONTEXT;
    *out = c;
    return CUDA_SUCCESS;
}

CUresult sim_ctx_current_locked(struct sim_ctx **out)
{
    if (!tls_depth)
        return CUDA_ERROR_INVALID_CONTEXT;
    return sim_ctx_lookup_locked((CUcontext)(uintptr_t)tls_stack[tls_depth - 1], out);
}

CUresult sim_ctx_usable(const struct sim_ctx *c)
{
    if (c->destroyed)
        return CUDA_ERROR_CONTEXT_IS_DESTROYED;
    return c->fault;
}

void sim_ctx_unref_locked(struct sim_ctx *c)
{
    if (--c->refs)
        return;
    pthread_cond_destroy(&c->cv);
    free(c);
}

static CUresult ctx_new_locked(CUdevice dev, bool primary, struct sim_ctx **out)
{
    struct sim_ctx *c = calloc(1, sizeof *c);
    if (!c)
        return CUDA_ERROR_OUT_OF_MEMORY;
    c->refs = 1; /* the registry's */
    c->dev = dev;
    c->primary = primary;
    c->id = ++sim.ctx_ids;
    pthread_cond_init(&c->cv, NULL);
    uint64_t kept = primary ? sim.dev[dev].primary_handle : 0;
    c->handle = kept ? kept : sim_handle_new(SIM_T_CTX, c);
    if (kept)
        sim_handle_revive(kept, c);
    if (c->handle)
        c->default_stream = sim_stream_new_locked(c, CU_STREAM_DEFAULT);
    if (!c->default_stream) {
        if (kept)
            sim_handle_park(kept);
        else
            sim_handle_free(c->handle);
        pthread_cond_destroy(&c->cv);
        free(c);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    sim.n_ctx++;
    c->live_next = sim.live;
    if (sim.live)
        sim.live->live_prev = c;
    sim.live = c;
    *out = c;
    return CUDA_SUCCESS;
}

static void ctx_destroy_locked(struct sim_ctx *c)
{
    c->destroyed = true;
    if (c->primary) {
        sim_handle_park(c->handle);
        sim.dev[c->dev].primary_handle = c->handle;
    } else {
        sim_handle_free(c->handle);
    }
    sim.n_ctx--;
    if (c->live_prev)
        c->live_prev->live_next = c->live_next;
    else
        sim.live = c->live_next;
    if (c->live_next)
        c->live_next->live_prev = c->live_prev;
    c->default_stream = NULL;
    c->ptds = NULL;
    while (c->streams)
        sim_stream_kill_locked(c->streams);
    while (c->events)
        sim_event_kill_locked(c->events);
    if (c->waiters)
        pthread_cond_broadcast(&c->cv);
    sim_sched_kick_locked(); /* waits elsewhere on its dropped records are released */
    if (tls_depth && tls_stack[tls_depth - 1] == c->handle)
        tls_depth--;
    sim_ctx_unref_locked(c);
}

void sim_fault_all_locked(struct sim_ctx *c, CUresult fault)
{
    if (sim.fault_one_ctx) {
        sim_ctx_fault_locked(c, fault);
        return;
    }
    for (struct sim_ctx *x = sim.live; x; x = x->live_next) /* faulting frees no context */
        sim_ctx_fault_locked(x, fault);
}

void sim_ctx_fault_locked(struct sim_ctx *c, CUresult fault)
{
    if (c->destroyed || c->fault)
        return;
    c->fault = fault;
    c->fault_at = sim_now_ns();
    for (struct sim_stream *s = c->streams, *next; s; s = next) {
        next = s->ctx_next;
        sim_stream_fault_locked(s);
    }
    for (struct sim_event *e = c->events; e; e = e->ctx_next)
        if (e->waiters)
            pthread_cond_broadcast(&e->cv);
    if (c->waiters)
        pthread_cond_broadcast(&c->cv);
    sim_sched_kick_locked();
}

/* ---- devices ---- */

SIM_API CUresult cuDeviceGetCount(int *count)
{
    SIM_CHECK_INIT();
    if (!count)
        return CUDA_ERROR_INVALID_VALUE;
    *count = sim.ndev;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuDeviceGet(CUdevice *dev, int ordinal)
{
    SIM_CHECK_INIT();
    if (!dev)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult rc = check_device(ordinal);
    if (rc == CUDA_SUCCESS)
        *dev = ordinal;
    return rc;
}

SIM_API CUresult cuDeviceGetName(char *name, int len, CUdevice dev)
{
    SIM_CHECK_INIT();
    if (!name || len <= 0)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult rc = check_device(dev);
    if (rc == CUDA_SUCCESS)
        snprintf(name, (size_t)len, "cudafd simulated GPU %d", dev);
    return rc;
}

SIM_API CUresult cuDeviceGetAttribute(int *value, int attrib, CUdevice dev)
{
    SIM_CHECK_INIT();
    if (!value)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult rc = check_device(dev);
    if (rc != CUDA_SUCCESS)
        return rc;
    switch (attrib) {
    case 75: *value = 9; break;   /* COMPUTE_CAPABILITY_MAJOR */
    case 76: *value = 0; break;   /* COMPUTE_CAPABILITY_MINOR */
    case 16: *value = 132; break; /* MULTIPROCESSOR_COUNT */
    default: *value = 0; break;
    }
    return CUDA_SUCCESS;
}

SIM_API CUresult cuDevicePrimaryCtxRetain(CUcontext *ctx, CUdevice dev)
{
    SIM_CHECK_INIT();
    if (!ctx)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult rc = check_device(dev);
    if (rc != CUDA_SUCCESS)
        return rc;
    pthread_mutex_lock(&sim.lock);
    struct sim_device *d = &sim.dev[dev];
    if (!d->primary)
        rc = ctx_new_locked(dev, true, &d->primary);
    if (rc == CUDA_SUCCESS) {
        d->primary_refs++;
        *ctx = to_handle(d->primary);
    }
    pthread_mutex_unlock(&sim.lock);
    return rc;
}

SIM_API CUresult cuDevicePrimaryCtxRelease(CUdevice dev)
{
    SIM_CHECK_INIT();
    CUresult rc = check_device(dev);
    if (rc != CUDA_SUCCESS)
        return rc;
    pthread_mutex_lock(&sim.lock);
    struct sim_device *d = &sim.dev[dev];
    if (!d->primary) {
        rc = CUDA_ERROR_INVALID_CONTEXT;
    } else if (--d->primary_refs == 0) {
        ctx_destroy_locked(d->primary);
        d->primary = NULL;
    }
    pthread_mutex_unlock(&sim.lock);
    return rc;
}

SIM_API CUresult cuCtxGetId(CUcontext ctx, unsigned long long *id)
{
    SIM_CHECK_INIT();
    if (!id)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&sim.lock);
    struct sim_ctx *c;
    CUresult rc = ctx ? sim_ctx_lookup_locked(ctx, &c) : sim_ctx_current_locked(&c);
    if (rc == CUDA_SUCCESS)
        *id = c->id;
    pthread_mutex_unlock(&sim.lock);
    return rc;
}

SIM_API CUresult cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int *flags, int *active)
{
    SIM_CHECK_INIT();
    if (!flags || !active)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult rc = check_device(dev);
    if (rc != CUDA_SUCCESS)
        return rc;
    pthread_mutex_lock(&sim.lock);
    *flags = 0;
    *active = sim.dev[dev].primary != NULL;
    pthread_mutex_unlock(&sim.lock);
    return CUDA_SUCCESS;
}

/* ---- contexts ---- */

SIM_API CUresult cudafdsim_ctx_create(CUdevice dev, CUcontext *ctx)
{
    CUresult rc = sim_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!ctx)
        return CUDA_ERROR_INVALID_VALUE;
    if ((rc = check_device(dev)) != CUDA_SUCCESS)
        return rc;
    struct sim_ctx *c;
    pthread_mutex_lock(&sim.lock);
    rc = ctx_new_locked(dev, false, &c);
    if (rc == CUDA_SUCCESS)
        *ctx = to_handle(c);
    pthread_mutex_unlock(&sim.lock);
    return rc;
}

static CUresult destroy_user_ctx(CUcontext h)
{
    struct sim_ctx *c;
    pthread_mutex_lock(&sim.lock);
    CUresult rc = sim_ctx_lookup_locked(h, &c);
    if (rc == CUDA_SUCCESS && c->primary)
        rc = CUDA_ERROR_INVALID_CONTEXT; /* primary contexts go by release */
    if (rc == CUDA_SUCCESS)
        ctx_destroy_locked(c);
    pthread_mutex_unlock(&sim.lock);
    return rc;
}

SIM_API CUresult cudafdsim_ctx_destroy(CUcontext ctx)
{
    SIM_CHECK_INIT(); /* also in a fork() child (sim_api.c) */
    return destroy_user_ctx(ctx);
}

SIM_API CUresult cuCtxDestroy(CUcontext ctx)
{
    SIM_CHECK_INIT();
    return destroy_user_ctx(ctx);
}

SIM_API CUresult cudafdsim_ctx_fault(CUcontext ctx, CUresult *fault)
{
    SIM_CHECK_INIT();
    if (!fault)
        return CUDA_ERROR_INVALID_VALUE;
    struct sim_ctx *c;
    pthread_mutex_lock(&sim.lock);
    CUresult rc = sim_ctx_lookup_locked(ctx, &c);
    if (rc == CUDA_SUCCESS)
        *fault = c->fault;
    pthread_mutex_unlock(&sim.lock);
    return rc;
}

SIM_API CUresult cuCtxCreate(CUcontext *ctx, unsigned int flags, CUdevice dev)
{
    SIM_CHECK_INIT();
    if (!ctx)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult rc = check_device(dev);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (tls_depth == SIM_CTX_STACK_MAX)
        return CUDA_ERROR_OUT_OF_MEMORY;
    struct sim_ctx *c;
    pthread_mutex_lock(&sim.lock);
    rc = ctx_new_locked(dev, false, &c);
    if (rc == CUDA_SUCCESS) {
        tls_stack[tls_depth++] = c->handle;
        *ctx = to_handle(c);
    }
    pthread_mutex_unlock(&sim.lock);
    return rc;
}

SIM_API CUresult cuCtxGetCurrent(CUcontext *ctx)
{
    SIM_CHECK_INIT();
    if (!ctx)
        return CUDA_ERROR_INVALID_VALUE;
    *ctx = tls_depth ? (CUcontext)(uintptr_t)tls_stack[tls_depth - 1] : NULL;
    return CUDA_SUCCESS;
}

static CUresult check_ctx(CUcontext h)
{
    struct sim_ctx *c;
    pthread_mutex_lock(&sim.lock);
    CUresult rc = sim_ctx_lookup_locked(h, &c);
    pthread_mutex_unlock(&sim.lock);
    return rc;
}

SIM_API CUresult cuCtxSetCurrent(CUcontext ctx)
{
    SIM_CHECK_INIT();
    if (!ctx) {
        if (tls_depth)
            tls_depth--;
        return CUDA_SUCCESS;
    }
    CUresult rc = check_ctx(ctx);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!tls_depth)
        tls_depth = 1;
    tls_stack[tls_depth - 1] = (uint64_t)(uintptr_t)ctx;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuCtxPushCurrent(CUcontext ctx)
{
    SIM_CHECK_INIT();
    if (!ctx)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult rc = check_ctx(ctx);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (tls_depth == SIM_CTX_STACK_MAX)
        return CUDA_ERROR_OUT_OF_MEMORY;
    tls_stack[tls_depth++] = (uint64_t)(uintptr_t)ctx;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuCtxPopCurrent(CUcontext *ctx)
{
    SIM_CHECK_INIT();
    if (!tls_depth)
        return CUDA_ERROR_INVALID_CONTEXT;
    uint64_t top = tls_stack[--tls_depth];
    if (ctx)
        *ctx = (CUcontext)(uintptr_t)top;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuCtxGetDevice(CUdevice *dev)
{
    SIM_CHECK_INIT();
    if (!dev)
        return CUDA_ERROR_INVALID_VALUE;
    struct sim_ctx *c;
    pthread_mutex_lock(&sim.lock);
    CUresult rc = sim_ctx_current_locked(&c);
    if (rc == CUDA_SUCCESS)
        *dev = c->dev;
    pthread_mutex_unlock(&sim.lock);
    return rc;
}

SIM_API CUresult cuCtxSynchronize(void)
{
    SIM_CHECK_INIT();
    struct sim_ctx *c;
    pthread_mutex_lock(&sim.lock);
    CUresult rc = sim_ctx_current_locked(&c);
    if (rc == CUDA_SUCCESS) {
        c->refs++;
        c->waiters++;
        while ((rc = sim_ctx_usable(c)) == CUDA_SUCCESS && c->queued)
            pthread_cond_wait(&c->cv, &sim.lock);
        c->waiters--;
        sim_ctx_unref_locked(c);
    }
    pthread_mutex_unlock(&sim.lock);
    return rc;
}

CUresult sim_ctx_current_usable_locked(struct sim_ctx **c)
{
    CUresult rc = sim_ctx_current_locked(c);
    return rc == CUDA_SUCCESS ? sim_ctx_usable(*c) : rc;
}
