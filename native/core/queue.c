/*
 * queue.c - pushing a completion onto a notifier's queue.
 *
 * The lowest layer of a wait's way out: completing a wait (cfd_wait_complete
 * in waits.c) pushes {token, status} here, under the queue's mutex, writing
 * the eventfd only
 * when the queue was empty; the drain that empties it reads the eventfd
 * (notifier.c). So the fd is readable exactly while completions are queued
 * (notifier.c says why that loses and repeats nothing). Nothing here calls
 * another file of the core.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"

void cfd_notifier_signal(cudafd_notifier *n)
{
    uint64_t one = 1;
    while (write(n->fd, &one, sizeof one) < 0 && errno == EINTR)
        ;
}

void cfd_notifier_push(cudafd_notifier *n, uint64_t token, int64_t status)
{
    pthread_mutex_lock(&n->mu);
    if (n->qhead + n->qlen == n->qcap) {
        if (n->qhead > 0) { /* compact before growing */
            memmove(n->q, n->q + n->qhead, n->qlen * sizeof *n->q);
            n->qhead = 0;
        }
        if (n->qlen == n->qcap) {
            size_t cap = n->qcap ? 2 * n->qcap : 64;
            cudafd_completion *grown = realloc(n->q, cap * sizeof *grown);
            if (!grown) { /* cannot happen in practice; a lost completion would hang a waiter */
                pthread_mutex_unlock(&n->mu);
                abort();
            }
            n->q = grown;
            n->qcap = cap;
        }
    }
    n->q[n->qhead + n->qlen] = (cudafd_completion){.token = token, .status = status};
    if (n->qlen++ == 0)
        cfd_notifier_signal(n);
    pthread_mutex_unlock(&n->mu);
}
