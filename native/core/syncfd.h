/*
 * syncfd.h - the syncfd mechanism's calls into syncfd.c, for watch.c and the
 * poller (waiters.c). See syncfd.c for the path and the facts it relies on.
 */
#ifndef CUDAFD_SYNCFD_H
#define CUDAFD_SYNCFD_H

#include <stdbool.h>
#include <stdint.h>

#include "../cuda_abi.h"

struct cfd_syncrec; /* one caller's stream: its NvSciSync object and imported semaphore */
struct cfd_ctx;     /* a context's record (internal.h) */

/* A point signalled on a stream: the syncpoint `id` passes `thr` there. */
typedef struct cfd_syncpt {
    struct cfd_syncrec *rec;
    uint32_t id, thr;
} cfd_syncpt;

/* CUDAFD_OK when the mechanism can be used (the probe, run once, passed),
 * else CUDAFD_E_UNSUPPORTED with the failed step in the message. */
int cfd_syncfd_available(void);
/* Signal the stream's semaphore at the stream's current end (its context
 * current, cx its record, held by the caller) and fill *sp; `key` is the
 * stream's id (watch.c, stream_key). A new stream record keeps cx. On
 * success the stream's record stays locked, so its points are queued in the
 * order they were signalled, until cfd_syncfd_signal_end(sp). */
int cfd_syncfd_signal(struct cfd_ctx *cx, CUstream stream, uint64_t key, uint64_t thread, cfd_syncpt *sp);
void cfd_syncfd_signal_end(cfd_syncpt *sp);
/* g.mu held: arm the process's pollfd (made at the first call) for the point. */
bool cfd_syncfd_arm_locked(const cfd_syncpt *sp); /* true: the pollfd is new (wake the poller) */
/* g.mu held: the pollfd the poller sleeps on too (-1: none yet), and its
 * closing by the poller as it exits. */
int cfd_syncfd_pollfd_locked(void);
void cfd_syncfd_close_pollfd_locked(void);
/* After the pollfd woke the poller, before it looks at any point. */
void cfd_syncfd_ack(int pollfd);
/* Has the point passed? 1 yes, 0 not yet, negative: cannot tell (the backstop decides). */
int cfd_syncfd_check(uint32_t id, uint32_t thr);
/* g.mu held: a wait record names rec (+1) or no longer does (-1). */
void cfd_syncfd_hold_locked(struct cfd_syncrec *rec, int delta);
/* g.mu held: what the record knows has passed already (no system call);
 * and what a check found. */
bool cfd_syncfd_known_passed_locked(const struct cfd_syncrec *rec, uint32_t thr);
void cfd_syncfd_note_passed_locked(struct cfd_syncrec *rec, uint32_t thr);
/* A new sync_file fd (close-on-exec) that turns readable when the point passes. */
int cfd_syncfd_sync_file(uint32_t id, uint32_t thr, int *fd);
/* How often the backstop asks the driver about a pending point. */
int64_t cfd_syncfd_backstop_ns(void);
/* g.mu held: free the streams' records that no watch or wait uses, with
 * their semaphores where their signals all ran (syncfd.c says which go how). */
void cfd_syncfd_release_idle_locked(void);

#endif /* CUDAFD_SYNCFD_H */
