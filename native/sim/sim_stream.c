/*
 * sim_stream.c - streams, their operation queues and the stream entry points.
 *
 * Facts this code relies on:
 *  - A stream is a FIFO of operations; only the head can run. The scheduler
 *    sees a stream only while it is on the active list, i.e. while its queue
 *    is non-empty, so idle and dead streams cost nothing.
 *  - Stream handles 0 and CU_STREAM_LEGACY resolve to the current context's
 *    default stream, CU_STREAM_PER_THREAD to the calling thread's own stream
 *    in the current context (created on first use, kept until the context
 *    goes). Any other value must be a live handle from cuStreamCreate.
 *  - cuStreamDestroy releases the handle at once; queued work still runs and
 *    the object is freed when its queue drains (as the driver does). The
 *    next stream created gets the same handle (sim_handles.c), as on an H200;
 *    cuStreamGetId tells them apart (from CUDA 12.0: pretending to be an
 *    older driver, $CUDAFD_SIM_DRIVER_VERSION, it fails).
 *  - Stream synchronisation waits for the operations enqueued before the
 *    call (done_count reaching the enqueue count seen at the call), so work
 *    enqueued meanwhile by other threads cannot starve it.
 *  - A kernel starts when it reaches the head of its stream, or at its
 *    enqueue time if later; back-to-back kernels start at their
 *    predecessor's end time, so scheduler wake-up latency does not add up.
 */
#include <stdlib.h>
#include <time.h>

#include "sim_internal.h"

/* ---- objects ---- */

struct sim_stream *sim_stream_new_locked(struct sim_ctx *ctx, unsigned int flags)
{
    struct sim_stream *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->refs = 1; /* the context's list */
    s->id = ++sim.stream_ids;
    s->ctx = ctx;
    ctx->refs++;
    s->flags = flags;
    pthread_cond_init(&s->cv, NULL);
    s->ctx_next = ctx->streams;
    if (ctx->streams)
        ctx->streams->ctx_prev = s;
    ctx->streams = s;
    return s;
}

void sim_stream_unref_locked(struct sim_stream *s)
{
    if (--s->refs)
        return;
    sim_ctx_unref_locked(s->ctx);
    pthread_cond_destroy(&s->cv);
    free(s);
}

static void active_add(struct sim_stream *s)
{
    if (s->active)
        return;
    s->active = true;
    s->act_prev = NULL;
    s->act_next = sim.active;
    if (sim.active)
        sim.active->act_prev = s;
    sim.active = s;
}

static void active_remove(struct sim_stream *s)
{
    if (!s->active)
        return;
    s->active = false;
    if (s->act_prev)
        s->act_prev->act_next = s->act_next;
    else
        sim.active = s->act_next;
    if (s->act_next)
        s->act_next->act_prev = s->act_prev;
    s->act_prev = s->act_next = NULL;
}

/* Leave the context's list (dropping that reference). */
static void retire(struct sim_stream *s)
{
    struct sim_ctx *c = s->ctx;
    if (s->ctx_prev)
        s->ctx_prev->ctx_next = s->ctx_next;
    else
        c->streams = s->ctx_next;
    if (s->ctx_next)
        s->ctx_next->ctx_prev = s->ctx_prev;
    s->ctx_prev = s->ctx_next = NULL;
    sim_stream_unref_locked(s);
}

static void release_handle(struct sim_stream *s)
{
    if (!s->handle)
        return;
    sim_handle_free(s->handle);
    s->handle = 0;
    if (s->user)
        sim.n_streams--;
}

/* A host notification left its context's queue (done or dropped). */
static void notify_retired(struct sim_ctx *c, struct sim_op *op)
{
    if (!op->notify)
        return;
    op->notify = false;
    c->notify--;
    pthread_cond_broadcast(&sim.notify_cv);
}

/* Empty a stream's queue. A fault (run_hosts) still runs the host functions
 * queued on it, at once, as an H200 does (bench/fault_bystanders.py): the
 * work before them never finished, so a host function's run proves nothing.
 * Otherwise (the context is going away) a host function not yet started
 * never runs. */
static void drop_queue(struct sim_stream *s, bool run_hosts)
{
    struct sim_ctx *c = s->ctx;
    pthread_cond_broadcast(&sim.notify_cv); /* callers waiting for room see the fault or the end */
    for (struct sim_op *op = s->head, *next; op; op = next) {
        next = op->next;
        if (run_hosts && op->kind == SIM_OP_HOST) {
            if (op->host.state == SIM_HOST_QUEUED)
                sim_callback_submit_locked(op);
        } else {
            op->dropped = true; /* a host function handed over is skipped */
        }
        notify_retired(c, op);
        if (op->kind == SIM_OP_RECORD && op->record.ev) {
            sim_event_unref_locked(op->record.ev);
            op->record.ev = NULL;
        }
        c->queued--;
        sim.n_queued--;
        sim_op_unref_locked(op);
    }
    s->head = s->tail = NULL;
    active_remove(s);
}

void sim_stream_fault_locked(struct sim_stream *s)
{
    drop_queue(s, true);
    if (s->waiters)
        pthread_cond_broadcast(&s->cv);
    if (s->destroyed)
        retire(s);
}

void sim_stream_kill_locked(struct sim_stream *s)
{
    drop_queue(s, false);
    release_handle(s);
    s->destroyed = true;
    if (s->waiters)
        pthread_cond_broadcast(&s->cv);
    retire(s);
}

CUresult sim_stream_resolve_locked(CUstream h, struct sim_stream **out)
{
    if (h == NULL || h == CU_STREAM_LEGACY || h == CU_STREAM_PER_THREAD) {
        struct sim_ctx *c;
        CUresult rc = sim_ctx_current_locked(&c);
        if (rc != CUDA_SUCCESS)
            return rc;
        if (h != CU_STREAM_PER_THREAD) {
            *out = c->default_stream;
            return CUDA_SUCCESS;
        }
        uint64_t tid = sim_thread_id();
        struct sim_stream *s;
        for (s = c->ptds; s; s = s->ptds_next)
            if (s->owner_tid == tid)
                break;
        if (!s) {
            if (!(s = sim_stream_new_locked(c, CU_STREAM_DEFAULT)))
                return CUDA_ERROR_OUT_OF_MEMORY;
            s->owner_tid = tid;
            s->ptds_next = c->ptds;
            c->ptds = s;
        }
        *out = s;
        return CUDA_SUCCESS;
    }
    struct sim_stream *s = sim_handle_get((uint64_t)(uintptr_t)h, SIM_T_STREAM);
    if (!s)
        return CUDA_ERROR_INVALID_HANDLE;
    *out = s;
    return CUDA_SUCCESS;
}

/* ---- operations ---- */

struct sim_op *sim_op_new(enum sim_op_kind kind)
{
    struct sim_op *op = calloc(1, sizeof *op);
    if (op) {
        op->refs = 1; /* the queue's */
        op->kind = kind;
    }
    return op;
}

void sim_op_unref_locked(struct sim_op *op)
{
    if (--op->refs)
        return;
    if (op->kind == SIM_OP_RECORD && op->record.ev)
        sim_event_unref_locked(op->record.ev);
    if (op->kind == SIM_OP_WAIT)
        sim_op_unref_locked(op->wait.rec);
    free(op);
}

static bool no_room(const struct sim_ctx *c, const struct sim_op *op)
{
    return c->create_blocked > 0 || (op->notify ? c->notify >= CUDAFDSIM_NOTIFY_MAX : c->notify_blocked > 0);
}

/* Wait for room for a host notification (op->notify), or for the callers
 * waiting for room or in a blocked cuStreamCreate (any op): the driver's
 * stalls (cudafd_sim.h). */
static CUresult wait_for_room(struct sim_stream *s, struct sim_op *op)
{
    struct sim_ctx *c = s->ctx;
    if (!no_room(c, op))
        return CUDA_SUCCESS;
    CUresult rc = CUDA_SUCCESS;
    s->refs++;
    c->notify_blocked += op->notify;
    while (rc == CUDA_SUCCESS && no_room(c, op)) {
        pthread_cond_wait(&sim.notify_cv, &sim.lock);
        rc = s->destroyed ? CUDA_ERROR_INVALID_HANDLE : sim_ctx_usable(c);
    }
    c->notify_blocked -= op->notify;
    pthread_cond_broadcast(&sim.notify_cv); /* the others behind it */
    sim_stream_unref_locked(s);
    return rc;
}

CUresult sim_enqueue_locked(struct sim_stream *s, struct sim_op *op)
{
    CUresult rc = sim_sched_start_locked();
    if (rc != CUDA_SUCCESS)
        return rc;
    if ((rc = wait_for_room(s, op)) != CUDA_SUCCESS)
        return rc;
    if (op->notify)
        s->ctx->notify++;
    op->enq_ns = sim_now_ns();
    op->next = NULL;
    if (s->tail) {
        s->tail->next = op; /* the scheduler reaches it after the ops ahead */
    } else {
        s->head = op;
        s->head_ready_ns = op->enq_ns;
        active_add(s);
        sim_sched_kick_locked();
    }
    s->tail = op;
    s->enq_count++;
    s->ctx->queued++;
    sim.n_queued++;
    return CUDA_SUCCESS;
}

bool sim_stream_pop_locked(struct sim_stream *s, uint64_t ready_ns)
{
    struct sim_ctx *c = s->ctx;
    struct sim_op *op = s->head;
    s->head = op->next;
    if (!s->head)
        s->tail = NULL;
    s->head_ready_ns = ready_ns;
    s->done_count++;
    c->queued--;
    sim.n_queued--;
    notify_retired(c, op);
    sim_op_unref_locked(op);
    if (s->waiters)
        pthread_cond_broadcast(&s->cv);
    if (!c->queued && c->waiters)
        pthread_cond_broadcast(&c->cv);
    if (s->head)
        return true;
    active_remove(s);
    if (!s->destroyed)
        return true;
    retire(s); /* a destroyed stream has drained */
    return false;
}

CUresult sim_launch_locked(struct sim_stream *s, uint64_t ns, CUresult fault)
{
    CUresult rc = sim_ctx_usable(s->ctx);
    if (rc != CUDA_SUCCESS)
        return rc;
    struct sim_op *op = sim_op_new(SIM_OP_KERNEL);
    if (!op)
        return CUDA_ERROR_OUT_OF_MEMORY;
    op->kernel.ns = ns;
    op->kernel.fault = fault;
    if ((rc = sim_enqueue_locked(s, op)) != CUDA_SUCCESS)
        free(op);
    return rc;
}

/* ---- entry points ---- */

/* A stream creation that waits for the context's queued work (cudafd_sim.h);
 * enqueues wait behind it meanwhile. */
static void drain_first(struct sim_ctx *c)
{
    c->refs++;
    c->create_blocked++;
    c->waiters++;
    while (sim_ctx_usable(c) == CUDA_SUCCESS && c->queued)
        pthread_cond_wait(&c->cv, &sim.lock);
    c->waiters--;
    c->create_blocked--;
    pthread_cond_broadcast(&sim.notify_cv); /* the enqueues behind it */
    sim_ctx_unref_locked(c);
}

SIM_API CUresult cuStreamCreate(CUstream *stream, unsigned int flags)
{
    SIM_CHECK_INIT();
    if (!stream || (flags & ~(unsigned)CU_STREAM_NON_BLOCKING))
        return CUDA_ERROR_INVALID_VALUE;
    struct sim_ctx *c;
    pthread_mutex_lock(&sim.lock);
    CUresult rc = sim_ctx_current_usable_locked(&c);
    if (rc == CUDA_SUCCESS) {
        struct sim_stream *s = sim_stream_new_locked(c, flags);
        if (s && (s->handle = sim_handle_new(SIM_T_STREAM, s))) {
            s->user = true;
            sim.n_streams++;
            *stream = (CUstream)(uintptr_t)s->handle;
            if (++c->streams_made % CUDAFDSIM_STREAM_BLOCK == 0)
                drain_first(c);
        } else {
            if (s)
                retire(s);
            rc = CUDA_ERROR_OUT_OF_MEMORY;
        }
    }
    pthread_mutex_unlock(&sim.lock);
    return rc;
}

SIM_API CUresult cuStreamDestroy(CUstream stream)
{
    SIM_CHECK_INIT();
    pthread_mutex_lock(&sim.lock);
    CUresult rc = CUDA_ERROR_INVALID_HANDLE;
    struct sim_stream *s = sim_handle_get((uint64_t)(uintptr_t)stream, SIM_T_STREAM);
    if (s) {
        rc = CUDA_SUCCESS;
        release_handle(s);
        s->destroyed = true;
        if (!s->head)
            retire(s); /* else the scheduler retires it once drained */
    }
    pthread_mutex_unlock(&sim.lock);
    return rc;
}

SIM_API CUresult cuStreamGetCtx(CUstream stream, CUcontext *ctx)
{
    SIM_CHECK_INIT();
    if (!ctx)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&sim.lock);
    struct sim_stream *s;
    CUresult rc = sim_stream_resolve_locked(stream, &s);
    if (rc == CUDA_SUCCESS)
        *ctx = (CUcontext)(uintptr_t)s->ctx->handle;
    pthread_mutex_unlock(&sim.lock);
    return rc;
}

SIM_API CUresult cuStreamGetId(CUstream stream, unsigned long long *id)
{
    SIM_CHECK_INIT();
    if (sim_driver_version() < 12000)
        return CUDA_ERROR_NOT_FOUND; /* pretending to be an older driver, which has no such call */
    if (!id)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&sim.lock);
    struct sim_stream *s;
    CUresult rc = sim_stream_resolve_locked(stream, &s);
    if (rc == CUDA_SUCCESS)
        *id = s->id;
    pthread_mutex_unlock(&sim.lock);
    return rc;
}

SIM_API CUresult cuStreamQuery(CUstream stream)
{
    SIM_CHECK_INIT();
    pthread_mutex_lock(&sim.lock);
    struct sim_stream *s;
    CUresult rc = sim_stream_resolve_locked(stream, &s);
    if (rc == CUDA_SUCCESS)
        rc = sim_ctx_usable(s->ctx);
    if (rc == CUDA_SUCCESS && s->head)
        rc = CUDA_ERROR_NOT_READY;
    pthread_mutex_unlock(&sim.lock);
    return rc;
}

SIM_API CUresult cuStreamSynchronize(CUstream stream)
{
    SIM_CHECK_INIT();
    pthread_mutex_lock(&sim.lock);
    struct sim_stream *s;
    CUresult rc = sim_stream_resolve_locked(stream, &s);
    if (rc == CUDA_SUCCESS) {
        uint64_t target = s->enq_count;
        s->refs++;
        s->waiters++;
        while ((rc = sim_ctx_usable(s->ctx)) == CUDA_SUCCESS && s->done_count < target)
            pthread_cond_wait(&s->cv, &sim.lock);
        s->waiters--;
        sim_stream_unref_locked(s);
    }
    pthread_mutex_unlock(&sim.lock);
    return rc;
}

SIM_API CUresult cuStreamWaitEvent(CUstream stream, CUevent event, unsigned int flags)
{
    SIM_CHECK_INIT();
    if (flags > 1) /* CU_EVENT_WAIT_DEFAULT, CU_EVENT_WAIT_EXTERNAL */
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&sim.lock);
    struct sim_stream *s;
    CUresult rc = sim_stream_resolve_locked(stream, &s);
    struct sim_event *e = NULL;
    if (rc == CUDA_SUCCESS && !(e = sim_event_lookup_locked(event)))
        rc = CUDA_ERROR_INVALID_HANDLE;
    if (rc == CUDA_SUCCESS)
        rc = sim_ctx_usable(s->ctx);
    if (rc == CUDA_SUCCESS)
        rc = sim_ctx_usable(e->ctx);
    struct sim_op *rec = rc == CUDA_SUCCESS ? e->last : NULL;
    if (rec && !rec->done && !rec->dropped) {
        struct sim_op *op = sim_op_new(SIM_OP_WAIT);
        if (!op) {
            rc = CUDA_ERROR_OUT_OF_MEMORY;
        } else {
            op->wait.rec = rec;
            rec->refs++;
            if ((rc = sim_enqueue_locked(s, op)) != CUDA_SUCCESS)
                sim_op_unref_locked(op);
        }
    }
    pthread_mutex_unlock(&sim.lock);
    return rc;
}

static uint64_t host_launch_delay_ns; /* sim.lock */

SIM_API void cudafdsim_delay_next_host_launch(uint64_t ns)
{
    pthread_mutex_lock(&sim.lock);
    host_launch_delay_ns = ns;
    pthread_mutex_unlock(&sim.lock);
}

SIM_API CUresult cuLaunchHostFunc(CUstream stream, CUhostFn fn, void *user_data)
{
    SIM_CHECK_INIT();
    if (!fn)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&sim.lock);
    uint64_t delay = host_launch_delay_ns;
    host_launch_delay_ns = 0;
    pthread_mutex_unlock(&sim.lock);
    if (delay) /* blocked, as a real launch is while the driver's notifications are spent */
        sim_sleep_ns(delay);
    pthread_mutex_lock(&sim.lock);
    struct sim_stream *s;
    CUresult rc = sim_stream_resolve_locked(stream, &s);
    if (rc == CUDA_SUCCESS)
        rc = sim_ctx_usable(s->ctx);
    if (rc == CUDA_SUCCESS)
        rc = sim_callbacks_start_locked();
    if (rc == CUDA_SUCCESS) {
        struct sim_op *op = sim_op_new(SIM_OP_HOST);
        if (!op) {
            rc = CUDA_ERROR_OUT_OF_MEMORY;
        } else {
            op->host.fn = fn;
            op->host.data = user_data;
            op->host.state = SIM_HOST_QUEUED;
            op->notify = true;
            if ((rc = sim_enqueue_locked(s, op)) != CUDA_SUCCESS)
                free(op);
        }
    }
    pthread_mutex_unlock(&sim.lock);
    return rc;
}

SIM_API CUresult cudafdsim_launch(CUstream stream, uint64_t duration_ns, CUresult fault)
{
    CUresult rc = sim_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    pthread_mutex_lock(&sim.lock);
    struct sim_stream *s;
    rc = sim_stream_resolve_locked(stream, &s);
    if (rc == CUDA_SUCCESS)
        rc = sim_launch_locked(s, duration_ns, fault);
    pthread_mutex_unlock(&sim.lock);
    return rc;
}
