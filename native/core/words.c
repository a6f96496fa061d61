/*
 * words.c - words in host memory that the GPU writes just before a wait's
 * record: they tell the poller when to ask the driver about the wait.
 *
 * Facts relied on (an H200, docs/performance.md):
 *  - A driver query (cuEventQuery) costs the asking thread 0.35 us with the
 *    driver's default 8 hardware queues and 1.4 us with 32, so on many
 *    streams the poller's queries are most of its CPU; reading a word the
 *    GPU wrote costs a few ns.
 *  - cuStreamWriteValue32 (default flags) runs when the stream reaches it,
 *    after the work enqueued before it, and the work after it runs after it.
 *    The host may see the word before an event recorded after it reads done,
 *    and the stream is busy until that record is: so the write comes before
 *    the record, which stays the last work of ours on the caller's stream (a
 *    stream is idle once its wait returns), and a record that reads done
 *    means its write landed.
 *
 * A word is a hint, never an answer. Each wait of the event mechanism on a
 * stream takes a free word of its context's page, notes what it holds, and
 * writes a value new to the page there (one counter per page, under g.mu)
 * just before its record. The poller asks the driver about a lane's head
 * once the head's word changed, and every max(max_lateness, 10 ms) anyway
 * (waiters.c); only the event query says whether the wait is over or failed.
 * A fault stops the stream, so its write never comes: the backstop's query
 * finds the fault. A word is given back when its wait ends, which (its
 * record read done) is after its write landed, but for a wait dropped
 * unfinished, whose write may land later, into a word another wait has
 * taken since: that changes the word too, so the other wait is asked then
 * (its record most likely not done yet, it is then asked at the schedule),
 * never later than its own write would have made it.
 *
 * Life. A page is memory of the core's own (not cuMemHostAlloc's, which goes
 * with its context), registered in its context with cuMemHostRegister and
 * never unregistered or freed: a write may be queued at any time, and a GPU
 * write to memory no longer mapped is a fault in the caller's context. Pages
 * stay in a list by context for the process's life (one per context: 4 KiB,
 * 1024 waits with a word at once; more wait without one); a context record
 * made again, or used again after all notifiers closed, checks its page is
 * still mapped there (a context destroyed and made again at the same handle
 * lost the registration) and registers it again if not. Where the driver
 * lacks the three entry points, or registering or a write fails, waits go
 * without words and are asked at the schedule's every step.
 */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#define WORDS_PAGE 4096
#define WORDS_PER_PAGE ((int)(WORDS_PAGE / sizeof(uint32_t))) /* waits of one context with a word at once */

struct cfd_words {
    CUcontext ctx;
    uint32_t *host; /* WORDS_PER_PAGE words */
    CUdeviceptr dev; /* their address for the GPU, in ctx; g.mu */
    uint32_t value;  /* the last value handed out; g.mu */
    int nfree;       /* g.mu */
    uint16_t free[WORDS_PER_PAGE];
    struct cfd_words *next;
};

static struct cfd_words *pages; /* g.mu */

/* The page's address in the current context, registering it there if it is
 * not (or no longer) registered; 0 if it cannot be. Not under g.mu. */
static CUdeviceptr map_here(uint32_t *host)
{
    CUdeviceptr dev = 0;
    if (cu.cuMemHostGetDevicePointer(&dev, host, 0) == CUDA_SUCCESS && dev)
        return dev;
    CUresult r = cu.cuMemHostRegister(host, WORDS_PAGE, CU_MEMHOSTREGISTER_DEVICEMAP);
    if (r != CUDA_SUCCESS && r != CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED)
        return 0;
    if (cu.cuMemHostGetDevicePointer(&dev, host, 0) != CUDA_SUCCESS)
        return 0;
    return dev;
}

static struct cfd_words *find_locked(CUcontext ctx)
{
    struct cfd_words *w = pages;
    while (w && w->ctx != ctx)
        w = w->next;
    return w;
}

/* ctx's page, made and mapped if need be; NULL where it cannot be. */
static struct cfd_words *page_for(CUcontext ctx)
{
    if (!cu.cuMemHostRegister || !cu.cuMemHostGetDevicePointer || !cu.cuStreamWriteValue32)
        return NULL;
    pthread_mutex_lock(&g.mu);
    struct cfd_words *w = find_locked(ctx);
    pthread_mutex_unlock(&g.mu);
    if (!w) {
        struct cfd_words *fresh = calloc(1, sizeof *fresh);
        uint32_t *host = aligned_alloc(WORDS_PAGE, WORDS_PAGE);
        if (!fresh || !host) {
            free(fresh);
            free(host);
            return NULL;
        }
        memset(host, 0, WORDS_PAGE);
        fresh->ctx = ctx;
        fresh->host = host;
        fresh->nfree = WORDS_PER_PAGE;
        for (int i = 0; i < WORDS_PER_PAGE; i++)
            fresh->free[i] = (uint16_t)(WORDS_PER_PAGE - 1 - i);
        pthread_mutex_lock(&g.mu);
        if ((w = find_locked(ctx)) == NULL) { /* else another thread made it meanwhile: ours is unused */
            fresh->next = pages;
            pages = w = fresh;
            fresh = NULL;
        }
        pthread_mutex_unlock(&g.mu);
        if (fresh) {
            free(fresh->host);
            free(fresh);
        }
    }
    CUdeviceptr dev = map_here(w->host); /* (a page kept is never unmapped: registering it twice is harmless) */
    pthread_mutex_lock(&g.mu);
    w->dev = dev;
    pthread_mutex_unlock(&g.mu);
    return dev ? w : NULL;
}

void cfd_words_look_up(cfd_ctx *cx)
{
    if (__atomic_load_n(&cx->words_known, __ATOMIC_ACQUIRE))
        return;
    struct cfd_words *w = page_for(cx->ctx);
    pthread_mutex_lock(&g.mu);
    cx->words = w;
    __atomic_store_n(&cx->words_known, true, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&g.mu);
}

bool cfd_words_take(cfd_ctx *cx, cfd_word *w, CUdeviceptr *addr)
{
    struct cfd_words *p = cx->words;
    w->page = NULL;
    if (!p || !p->dev || p->nfree == 0)
        return false;
    w->page = p;
    w->slot = p->free[--p->nfree];
    if (++p->value == 0) /* (a word starts at 0) */
        ++p->value;
    w->value = p->value;
    w->before = __atomic_load_n(&p->host[w->slot], __ATOMIC_ACQUIRE);
    *addr = p->dev + (CUdeviceptr)w->slot * sizeof(uint32_t);
    return true;
}

void cfd_words_give(cfd_word *w)
{
    if (!w->page)
        return;
    w->page->free[w->page->nfree++] = w->slot;
    w->page = NULL;
}

bool cfd_words_changed(const cfd_word *w)
{
    return __atomic_load_n(&w->page->host[w->slot], __ATOMIC_ACQUIRE) != w->before;
}

void cfd_words_failed(cfd_ctx *cx)
{
    cx->words = NULL;
}
