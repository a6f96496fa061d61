/*
 * sim_event.c - events and their entry points.
 *
 * Facts this code relies on:
 *  - Each cuEventRecord enqueues a record op and makes it the event's
 *    `last`; the event's state is that op's: never recorded or `done` is
 *    complete. A re-record replaces `last`, so a query always answers for the
 *    latest record even if an earlier one (on another stream) is still queued.
 *  - The answer order is: context destroyed, context fault, event destroyed,
 *    complete, not ready. A fault therefore overrides completed records.
 *  - cuEventSynchronize waits for the record current at the call (a
 *    re-record meanwhile does not extend the wait). It sleeps on the event's
 *    condition variable holding references to the event and that record, so
 *    destroying the event (or its context) meanwhile wakes it with
 *    INVALID_HANDLE (or CONTEXT_IS_DESTROYED) and no memory is freed under it.
 *  - cuEventDestroy succeeds on a faulted context so that cleanup works; a
 *    record still queued keeps the event's memory, not its handle, alive.
 */
#include <stdlib.h>
#include <time.h>

#include "sim_internal.h"

struct sim_event *sim_event_lookup_locked(CUevent h)
{
    struct sim_event *e = sim_handle_get((uint64_t)(uintptr_t)h, SIM_T_EVENT);
    if (!e && sim_handle_was((uint64_t)(uintptr_t)h, SIM_T_EVENT)) /* destroyed, or gone with its context */
        sim.n_dead_calls++;
    return e;
}

void sim_event_unref_locked(struct sim_event *e)
{
    if (--e->refs)
        return;
    if (e->last)
        sim_op_unref_locked(e->last);
    sim_ctx_unref_locked(e->ctx);
    pthread_cond_destroy(&e->cv);
    free(e);
}

void sim_event_kill_locked(struct sim_event *e)
{
    struct sim_ctx *c = e->ctx;
    sim_handle_free(e->handle);
    sim.n_events--;
    e->destroyed = true;
    if (e->waiters)
        pthread_cond_broadcast(&e->cv);
    if (e->ctx_prev)
        e->ctx_prev->ctx_next = e->ctx_next;
    else
        c->events = e->ctx_next;
    if (e->ctx_next)
        e->ctx_next->ctx_prev = e->ctx_prev;
    sim_event_unref_locked(e); /* the context list's reference */
}

void sim_record_complete_locked(struct sim_op *rec)
{
    struct sim_event *e = rec->record.ev;
    rec->done = true;
    rec->record.ev = NULL;
    if (e->waiters)
        pthread_cond_broadcast(&e->cv);
    sim_event_unref_locked(e);
}

static CUresult state(const struct sim_event *e)
{
    CUresult rc = sim_ctx_usable(e->ctx);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (e->destroyed)
        return CUDA_ERROR_INVALID_HANDLE;
    return !e->last || e->last->done ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

SIM_API CUresult cuEventCreate(CUevent *event, unsigned int flags)
{
    SIM_CHECK_INIT();
    if (!event || (flags & ~7u)) /* BLOCKING_SYNC, DISABLE_TIMING, INTERPROCESS */
        return CUDA_ERROR_INVALID_VALUE;
    struct sim_ctx *c;
    pthread_mutex_lock(&sim.lock);
    CUresult rc = sim_ctx_current_usable_locked(&c);
    if (rc == CUDA_SUCCESS) {
        struct sim_event *e = calloc(1, sizeof *e);
        if (e && (e->handle = sim_handle_new(SIM_T_EVENT, e))) {
            e->refs = 1; /* the context list's */
            e->ctx = c;
            c->refs++;
            e->flags = flags;
            pthread_cond_init(&e->cv, NULL);
            e->ctx_next = c->events;
            if (c->events)
                c->events->ctx_prev = e;
            c->events = e;
            sim.n_events++;
            *event = (CUevent)(uintptr_t)e->handle;
        } else {
            free(e);
            rc = CUDA_ERROR_OUT_OF_MEMORY;
        }
    }
    pthread_mutex_unlock(&sim.lock);
    return rc;
}

SIM_API CUresult cuEventDestroy(CUevent event)
{
    SIM_CHECK_INIT();
    pthread_mutex_lock(&sim.lock);
    struct sim_event *e = sim_event_lookup_locked(event);
    if (e)
        sim_event_kill_locked(e);
    pthread_mutex_unlock(&sim.lock);
    return e ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

static uint64_t record_delay_ns; /* sim.lock */

SIM_API void cudafdsim_delay_after_next_record(uint64_t ns)
{
    pthread_mutex_lock(&sim.lock);
    record_delay_ns = ns;
    pthread_mutex_unlock(&sim.lock);
}

SIM_API int cudafdsim_record_delay_armed(void)
{
    pthread_mutex_lock(&sim.lock);
    int armed = record_delay_ns != 0;
    pthread_mutex_unlock(&sim.lock);
    return armed;
}

SIM_API CUresult cuEventRecord(CUevent event, CUstream stream)
{
    SIM_CHECK_INIT();
    pthread_mutex_lock(&sim.lock);
    uint64_t delay = record_delay_ns;
    record_delay_ns = 0;
    struct sim_event *e = sim_event_lookup_locked(event);
    struct sim_stream *s = NULL;
    CUresult rc = e ? sim_stream_resolve_locked(stream, &s) : CUDA_ERROR_INVALID_HANDLE;
    if (rc == CUDA_SUCCESS && s->ctx != e->ctx)
        rc = CUDA_ERROR_INVALID_HANDLE;
    if (rc == CUDA_SUCCESS)
        rc = sim_ctx_usable(s->ctx);
    if (rc == CUDA_SUCCESS) {
        struct sim_op *op = sim_op_new(SIM_OP_RECORD);
        if (op)
            op->notify = (e->flags & CU_EVENT_BLOCKING_SYNC) != 0;
        e->refs++; /* the enqueue may wait for room (unlocked) */
        if (!op) {
            rc = CUDA_ERROR_OUT_OF_MEMORY;
        } else if ((rc = sim_enqueue_locked(s, op)) != CUDA_SUCCESS) {
            free(op);
        } else {
            op->record.ev = e;
            e->refs++;
            op->refs++; /* the event's `last` */
            if (e->last)
                sim_op_unref_locked(e->last);
            e->last = op;
        }
        sim_event_unref_locked(e);
    }
    pthread_mutex_unlock(&sim.lock);
    if (delay) /* descheduled after the record, before the call returns */
        sim_sleep_ns(delay);
    return rc;
}

static uint64_t query_delay_ns; /* sim.lock */

SIM_API void cudafdsim_delay_next_query(uint64_t ns)
{
    pthread_mutex_lock(&sim.lock);
    query_delay_ns = ns;
    pthread_mutex_unlock(&sim.lock);
}

SIM_API CUresult cuEventQuery(CUevent event)
{
    SIM_CHECK_INIT();
    pthread_mutex_lock(&sim.lock);
    uint64_t delay = query_delay_ns;
    query_delay_ns = 0;
    if (delay) { /* descheduled between the call and its look at the event */
        pthread_mutex_unlock(&sim.lock);
        sim_sleep_ns(delay);
        pthread_mutex_lock(&sim.lock);
    }
    struct sim_event *e = sim_event_lookup_locked(event);
    CUresult rc = e ? state(e) : CUDA_ERROR_INVALID_HANDLE;
    pthread_mutex_unlock(&sim.lock);
    return rc;
}

/*
 * $CUDAFD_SIM_LATE_FAULT_MS mimics what an H200 does (bench/fault_probe.py):
 * a cuEventSynchronize already blocked when its context faults returns the
 * fault only when its own stream drains, which can be seconds later. Here it
 * returns that many milliseconds after the fault (or at the event's
 * destruction). Queries still report the fault at once. Off by default.
 */
static void late_fault_wait(struct sim_event *e)
{
    uint64_t until = e->ctx->fault_at + sim.late_fault_ns;
    for (uint64_t now = sim_now_ns(); now < until && !e->destroyed; now = sim_now_ns()) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        uint64_t t = (uint64_t)ts.tv_nsec + (until - now);
        ts.tv_sec += (time_t)(t / 1000000000ull);
        ts.tv_nsec = (long)(t % 1000000000ull);
        pthread_cond_timedwait(&e->cv, &sim.lock, &ts);
    }
}

SIM_API CUresult cuEventSynchronize(CUevent event)
{
    SIM_CHECK_INIT();
    pthread_mutex_lock(&sim.lock);
    struct sim_event *e = sim_event_lookup_locked(event);
    CUresult rc = e ? state(e) : CUDA_ERROR_INVALID_HANDLE;
    if (rc == CUDA_ERROR_NOT_READY) {
        struct sim_op *rec = e->last; /* the record current at the call */
        e->refs++;
        rec->refs++;
        e->waiters++;
        while ((rc = state(e)) == CUDA_ERROR_NOT_READY && !rec->done)
            pthread_cond_wait(&e->cv, &sim.lock);
        if (rc == CUDA_ERROR_NOT_READY)
            rc = CUDA_SUCCESS; /* re-recorded meanwhile; the awaited record is done */
        else if (rc != CUDA_SUCCESS && sim.late_fault_ns && !e->destroyed && e->ctx->fault)
            late_fault_wait(e);
        e->waiters--;
        sim_op_unref_locked(rec);
        sim_event_unref_locked(e);
    }
    pthread_mutex_unlock(&sim.lock);
    return rc;
}
