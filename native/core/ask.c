/*
 * ask.c - the caller's own thread asks about its notifier's waits.
 *
 * An event loop that runs a pass anyway (a spin notifier's loop never
 * sleeps) can find its waits' ends itself: cudafd_ask() queries, on the
 * calling thread, the event of every wait of the notifier that may be next
 * on its stream, and hands the completions of those that are over straight
 * to the caller, after whatever the queue held (a drain first), without the
 * hand-over from the poller's thread to its own (12-14 us on an H200 host:
 * docs/performance.md) and without the queue's eventfd write and read.
 *
 * Order. A stream's waits reach the caller in watch order: the queue is
 * drained under the same hold of g.mu as the snapshot, so every earlier wait
 * of a lane reported before it is in out[] already; and a wait taken by
 * another thread (the poller, a fault sweep) while the queries ran unlocked
 * stops its lane's run there, so no later wait of that lane overtakes it in
 * the queue. The next call drains it, then asks on.
 *
 * While a spin notifier is asking (cudafd_notifier_set_asking), its new waits
 * go to lanes of their own that the poller asks on the event mechanism's
 * schedule instead of spinning on them: the poller remains the backstop (a
 * loop that stops asking, a fault) without keeping a second core busy.
 *
 * Ownership. The lanes stay the poller's: a wait found over here is handed
 * to the caller (detached from its notifier as if drained) but left in its
 * lane, which the poller pops on its schedule. So a lane is still
 * changed by one thread only. The queries run unlocked on a snapshot of
 * tokens and events, inside a probe (cfd_probe_begin: no event is destroyed
 * meanwhile); a token that is no longer pending on the notifier when the
 * lock is taken again is skipped, so an event reused by a later wait in the
 * meantime is never taken for this one.
 *
 * Facts relied on: a stream runs its work in order (waiters.c), so of a
 * lane's waits only a run from its first pending one can be over, and the
 * first not over ends the run; cuEventQuery costs no system call on a real
 * GPU.
 */
#include "internal.h"

#define ASK_MAX 256 /* waits asked per call; more are asked by the next call */
#define ASK_RUN 8   /* of one lane: its first pending waits, in order */

struct asked {
    uint64_t token;
    CUevent ev;
    CUcontext ctx;
    CUresult r;
    int run; /* index of the first entry of its lane's run */
};

static uint32_t ask_round; /* marks the lanes a snapshot took (g.mu) */

static bool may_ask(const cudafd_notifier *n)
{
    return n->mech == CUDAFD_MECH_EVENT || n->mech == CUDAFD_MECH_SPIN;
}

CFD_API int cudafd_notifier_set_asking(cudafd_notifier *n, int on)
{
    if (!n)
        return cfd_fail(CUDAFD_E_INVALID, "notifier is NULL");
    if (n->mech != CUDAFD_MECH_SPIN)
        return cfd_fail(CUDAFD_E_INVALID, "only a spin notifier's waits can be left to its caller's asks");
    pthread_mutex_lock(&g.mu);
    n->asking = on != 0;
    pthread_mutex_unlock(&g.mu);
    return CUDAFD_OK;
}

int cfd_lane_kind(const cudafd_notifier *n)
{
    return n->asking ? CFD_LANE_ASKED : n->mech;
}

/* Up to ASK_RUN waits of n from the front of each lane n has waits in, up to max in all. g.mu held. */
static int snapshot(cudafd_notifier *n, struct asked *out, int max)
{
    uint32_t round = ++ask_round;
    int k = 0;
    for (cfd_wait *w = n->attached; w && k < max; w = w->nnext) {
        cfd_lane *l = w->lane;
        if (!l || l->ask_round == round)
            continue;
        l->ask_round = round;
        int run = k, taken = 0;
        for (cfd_wait *x = l->head; x && taken < ASK_RUN && k < max; x = x->next) {
            if (x->n != n)
                continue; /* reported or cancelled already, or another notifier's */
            out[k++] = (struct asked){x->token, x->ev, x->cx->ctx, CUDA_ERROR_NOT_READY, run};
            taken++;
        }
    }
    return k;
}

CFD_API int cudafd_ask(cudafd_notifier *n, cudafd_completion *out, int max)
{
    if (!n || !out || max < 1)
        return cfd_fail(CUDAFD_E_INVALID, "%s", !n ? "notifier is NULL" : !out ? "out is NULL" : "max < 1");
    if (!may_ask(n))
        return cfd_fail(CUDAFD_E_INVALID, "only the waits of an event or spin notifier can be asked about");
    int rc = cfd_fork_check();
    if (rc != CUDAFD_OK)
        return rc;
    if (cfd_inherited(n))
        return cfd_inherited_error();
    struct asked snap[ASK_MAX];
    pthread_mutex_lock(&g.mu);
    int got = n->closed ? cfd_fail(CUDAFD_E_CLOSED, "the notifier is closed") : cfd_notifier_take(n, out, max);
    int room = got < 0 ? 0 : max - got < ASK_MAX ? max - got : ASK_MAX;
    int k = room > 0 ? snapshot(n, snap, room) : 0;
    if (k == 0) {
        pthread_mutex_unlock(&g.mu);
        return got;
    }
    cfd_probe_begin();
    pthread_mutex_unlock(&g.mu);

    CUcontext ctx = NULL;
    bool pushed = false, entered = false;
    int queries = 0;
    for (int i = 0; i < k; i++) {
        if (i > snap[i].run && snap[i - 1].r != CUDA_SUCCESS)
            continue; /* an earlier wait of its lane is not over (or failed): nor is this one */
        if (!entered || snap[i].ctx != ctx) {
            cfd_leave_ctx(pushed);
            entered = cfd_enter_ctx(snap[i].ctx, &pushed) == CUDAFD_OK;
            ctx = snap[i].ctx;
            if (!entered)
                break; /* the poller asks them: it reports what this thread could not */
        }
        snap[i].r = cu.cuEventQuery(snap[i].ev);
        queries++;
    }
    if (entered)
        cfd_leave_ctx(pushed);
    cfd_count(ST_QUERIES, queries);

    pthread_mutex_lock(&g.mu);
    int stopped = -1; /* the run a wait taken meanwhile stopped */
    for (int i = 0; i < k; i++) {
        if (snap[i].r == CUDA_ERROR_NOT_READY || snap[i].run == stopped)
            continue;
        cfd_wait *w = cfd_wait_lookup(snap[i].token);
        if (!w || w->n != n || !cfd_wait_take(w, snap[i].r)) {
            stopped = snap[i].run; /* reported meanwhile (the poller, a fault) or cancelled */
            continue;
        }
        out[got++] = (cudafd_completion){.token = snap[i].token, .status = snap[i].r};
    }
    cfd_probe_end();
    pthread_mutex_unlock(&g.mu);
    return got;
}
