/*
 * sim_sched.c - the two threads that stand for the device: the scheduler and
 * the host-function callback thread.
 *
 * Facts this code relies on:
 *  - Every state change a thread may be waiting for is made under sim.lock,
 *    followed by a signal under the same lock, and every sleeper re-checks
 *    its condition under the lock: no wake-up is lost.
 *  - The scheduler holds the lock for a whole pass over the active list; the
 *    list changes during a pass only through the scheduler itself (popping a
 *    stream, or a fault dropping every context's streams, after which the
 *    pass restarts). Between passes it sleeps until the nearest kernel end
 *    (CLOCK_MONOTONIC, timer slack 1 ns) or a signal: a stream turning
 *    active, a host function returning, a context going away.
 *  - Host functions run on the callback thread, outside the lock, one at a
 *    time in the order the scheduler handed them over; their stream stays
 *    blocked until they return. One dropped before it started never runs.
 *  - Both threads start on first use, are detached, and live as long as the
 *    process.
 */
#include <sys/prctl.h>
#include <time.h>

#include "sim_internal.h"

void sim_cond_init_monotonic(pthread_cond_t *cv)
{
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(cv, &attr);
    pthread_condattr_destroy(&attr);
}

enum advance { ADV_IDLE, ADV_PROGRESS, ADV_RESTART };

/* Run `s`'s ready head operations; note the earliest kernel end still ahead. */
static enum advance advance(struct sim_stream *s, uint64_t now, uint64_t *deadline)
{
    enum advance result = ADV_IDLE;
    while (s->head) {
        struct sim_op *op = s->head;
        uint64_t ready = now;
        switch (op->kind) {
        case SIM_OP_KERNEL:
            if (!op->kernel.end_ns) {
                uint64_t start = s->head_ready_ns > op->enq_ns ? s->head_ready_ns : op->enq_ns;
                /* An end past what the clock counts is never reached, as on
                 * a GPU (cudafd_spin compares the time elapsed). */
                op->kernel.end_ns = op->kernel.ns > UINT64_MAX - start ? UINT64_MAX : start + op->kernel.ns;
                if (!op->kernel.end_ns)
                    op->kernel.end_ns = 1;
            }
            if (op->kernel.end_ns > now) {
                if (op->kernel.end_ns < *deadline)
                    *deadline = op->kernel.end_ns;
                return result;
            }
            sim.n_kernels++;
            if (op->kernel.fault) {
                sim_fault_all_locked(s->ctx, op->kernel.fault); /* drops this queue too */
                return ADV_RESTART;
            }
            ready = op->kernel.end_ns;
            break;
        case SIM_OP_RECORD:
            sim_record_complete_locked(op);
            break;
        case SIM_OP_WAIT:
            if (!op->wait.rec->done && !op->wait.rec->dropped)
                return result;
            break;
        case SIM_OP_SIGNAL:
            sim_syncpoint_incr_locked(op->signal.syncpoint);
            break;
        case SIM_OP_HOST:
            if (op->host.state == SIM_HOST_QUEUED)
                sim_callback_submit_locked(op);
            if (op->host.state != SIM_HOST_RETURNED)
                return result;
            break;
        }
        result = ADV_PROGRESS;
        if (!sim_stream_pop_locked(s, ready))
            return result; /* drained and freed */
    }
    return result;
}

static void *sched_main(void *arg)
{
    (void)arg;
    pthread_setname_np(pthread_self(), "cudafd-sim-dev");
    prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
    pthread_mutex_lock(&sim.lock);
    for (;;) {
        uint64_t deadline;
        bool progress;
        do {
            uint64_t now = sim_now_ns();
            deadline = UINT64_MAX;
            progress = false;
            for (struct sim_stream *s = sim.active, *next; s; s = next) {
                next = s->act_next;
                enum advance a = advance(s, now, &deadline);
                if (a == ADV_RESTART) {
                    progress = true;
                    break;
                }
                if (a == ADV_PROGRESS)
                    progress = true;
            }
        } while (progress);
        if (deadline == UINT64_MAX) {
            pthread_cond_wait(&sim.sched_cv, &sim.lock);
        } else {
            struct timespec ts = {.tv_sec = (time_t)(deadline / 1000000000u),
                                  .tv_nsec = (long)(deadline % 1000000000u)};
            pthread_cond_timedwait(&sim.sched_cv, &sim.lock, &ts);
        }
    }
    return NULL;
}

static void *callback_main(void *arg)
{
    (void)arg;
    pthread_setname_np(pthread_self(), "cudafd-sim-cb");
    pthread_mutex_lock(&sim.lock);
    for (;;) {
        while (!sim.cb_head)
            pthread_cond_wait(&sim.cb_cv, &sim.lock);
        struct sim_op *op = sim.cb_head;
        sim.cb_head = op->cb_next;
        if (!sim.cb_head)
            sim.cb_tail = NULL;
        if (!op->dropped) {
            CUhostFn fn = op->host.fn;
            void *data = op->host.data;
            op->host.state = SIM_HOST_RUNNING;
            pthread_mutex_unlock(&sim.lock);
            fn(data);
            pthread_mutex_lock(&sim.lock);
            sim.n_hostfns++;
            op->host.state = SIM_HOST_RETURNED;
            if (!op->dropped)
                pthread_cond_signal(&sim.sched_cv);
        }
        sim_op_unref_locked(op);
    }
    return NULL;
}

static CUresult start_thread(void *(*fn)(void *))
{
    pthread_attr_t attr;
    pthread_t t;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    int err = pthread_create(&t, &attr, fn, NULL);
    pthread_attr_destroy(&attr);
    return err ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_SUCCESS;
}

CUresult sim_sched_start_locked(void)
{
    if (sim.sched_started)
        return CUDA_SUCCESS;
    CUresult rc = start_thread(sched_main);
    sim.sched_started = rc == CUDA_SUCCESS;
    return rc;
}

CUresult sim_callbacks_start_locked(void)
{
    if (sim.cb_started)
        return CUDA_SUCCESS;
    CUresult rc = start_thread(callback_main);
    sim.cb_started = rc == CUDA_SUCCESS;
    return rc;
}

void sim_sched_kick_locked(void)
{
    if (sim.sched_started)
        pthread_cond_signal(&sim.sched_cv);
}

void sim_callback_submit_locked(struct sim_op *op)
{
    op->refs++; /* the callback queue's */
    op->host.state = SIM_HOST_DISPATCHED;
    op->cb_next = NULL;
    if (sim.cb_tail)
        sim.cb_tail->cb_next = op;
    else
        sim.cb_head = op;
    sim.cb_tail = op;
    pthread_cond_signal(&sim.cb_cv);
}
