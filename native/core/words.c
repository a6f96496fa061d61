/*
 * words.c - words in host memory that the GPU writes after a stream's work:
 * they tell the poller which lanes to ask the driver about.
 *
 * Facts relied on (an H200, docs/performance.md):
 *  - A driver query (cuEventQuery) costs the asking thread 0.35 us with the
 *    driver's default 8 hardware queues and 1.4 us with 32, so on many
 *    streams the poller's queries are most of its CPU; reading a word the
 *    GPU wrote costs a few ns.
 *  - cuStreamWriteValue32 (default flags) runs when the stream reaches it,
 *    after the work enqueued before it, the watch's record included.
 *
 * A word is a hint, never an answer. Each watch writes a value new to its
 * page (one counter per page, handed out under g.mu in watch order) to its
 * lane's word after its record; a lane is asked through the driver once its
 * word has reached its head's value (the head's own write ran, so its record
 * did, and the stream holds nothing of ours after it), and only the event
 * query says whether the head is over or failed. A lane whose head's write
 * has not run is taken to be running, but is asked through the driver anyway
 * every max(max_lateness, WORD_BACKSTOP_NS) (waiters.c). A write that never
 * comes (a fault stops the stream) is found by the backstop's query; a late
 * write of a lane that had the word before carries an older value, which
 * the head's does not count as reached (values compare modulo 2^32).
 *
 * Life. A page is memory of the core's own (not cuMemHostAlloc's, which goes
 * with its context), registered in its context with cuMemHostRegister and
 * never unregistered or freed: a write may be queued at any time, and a GPU
 * write to memory no longer mapped is a fault in the caller's context. Pages
 * stay in a list by context for the process's life (one per context: 4 KiB);
 * a context record made again, or used again after all notifiers closed,
 * checks its page is still mapped there (a context destroyed and made again
 * at the same handle lost the registration) and registers it again if not.
 * Where the driver lacks the three entry points, or registering or a write
 * fails, the lanes go back to asking the driver at their schedule.
 */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#define WORDS_PAGE 4096
#define WORDS_PER_PAGE ((int)(WORDS_PAGE / sizeof(uint32_t))) /* lanes of one context with a word at once */

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

void cfd_words_take(struct cfd_words *w, cfd_lane *l)
{
    if (l->word || !w || !w->dev || w->nfree == 0)
        return;
    int slot = w->free[--w->nfree];
    l->slot = slot;
    l->page = w;
    l->word = &w->host[slot];
}

void cfd_words_give(cfd_lane *l)
{
    if (!l->word)
        return;
    l->page->free[l->page->nfree++] = (uint16_t)l->slot;
    l->word = NULL;
    l->page = NULL;
}

bool cfd_words_reached(const cfd_lane *l, uint32_t value)
{
    uint32_t v = __atomic_load_n(l->word, __ATOMIC_ACQUIRE);
    return (int32_t)(v - value) >= 0;
}

uint32_t cfd_words_next(cfd_lane *l, CUdeviceptr *addr)
{
    struct cfd_words *w = l->page;
    if (++w->value == 0) /* (a word starts at 0) */
        ++w->value;
    *addr = w->dev + (CUdeviceptr)l->slot * sizeof(uint32_t);
    return w->value;
}

void cfd_words_failed(cfd_ctx *cx, cfd_lane *l)
{
    cx->words = NULL;
    if (l)
        cfd_words_give(l);
}
