/*
 * token_wrap.c - tokens across the wrap of their generation (waits.c), on the
 * simulator ($CUDAFD_DRIVER).
 *
 * A token is generation << SLOT_BITS | slot, and the generation starts again
 * at 1 after GEN_MAX. Reaching that takes 2^41 waits, so this test includes
 * waits.c itself (linked with the rest of the core, waits.c left out) and
 * sets the counter a few waits short of it. Through the public API it then
 * checks, for each mechanism, that the waits made across the wrap get
 * distinct tokens with a nonzero generation, all below 2^63, complete in order with their
 * own tokens, that a cancel across the wrap takes and a second one does not,
 * and that the token of a finished wait whose slot was reused after the wrap
 * is unknown. The core's live counts return to zero.
 */
#include "../core/waits.c"

#include <unistd.h>

#include "check.h"
#include "sim_calls.h"

enum { N = 8, BEFORE = 3 }; /* N waits, the first BEFORE of them ahead of the wrap */

static void across_the_wrap(int mech, CUcontext ctx)
{
    cudafd_notifier *n = NULL;
    CHECK(cudafd_notifier_create(mech, &n) == CUDAFD_OK, "mech %d: create", mech);
    CUstream s = NULL;
    CUcontext ignored;
    sim_push(ctx);
    sim_stream_create(&s, CU_STREAM_NON_BLOCKING);
    sim_pop(&ignored);

    pthread_mutex_lock(&g.mu); /* (the lock the core takes its waits under) */
    generation = GEN_MAX - BEFORE; /* the next BEFORE waits get the last generations */
    pthread_mutex_unlock(&g.mu);
    uint64_t tok[N];
    sim_launch(s, 100 * 1000 * 1000, 0); /* 100 ms ahead of them all: the cancel lands first */
    for (int i = 0; i < N; i++) {
        sim_launch(s, 100 * 1000, 0);
        CHECK(cudafd_watch_stream(n, (uintptr_t)s, &tok[i]) == CUDAFD_OK, "mech %d: watch %d", mech, i);
    }
    for (int i = 0; i < N; i++) {
        uint64_t gen = tok[i] >> SLOT_BITS;
        uint64_t want = i < BEFORE ? GEN_MAX - BEFORE + 1 + (uint64_t)i : (uint64_t)(i - BEFORE + 1);
        CHECK(gen == want, "mech %d: wait %d has generation %llu, not %llu", mech, i, (unsigned long long)gen,
              (unsigned long long)want);
        CHECK(tok[i] != 0 && tok[i] >> 63 == 0, "mech %d: wait %d has token %llx: not in 1 .. 2^63 - 1", mech, i,
              (unsigned long long)tok[i]);
        for (int j = 0; j < i; j++)
            CHECK(tok[i] != tok[j], "mech %d: waits %d and %d share a token", mech, j, i);
    }
    /* the last wait before the wrap is cancelled: once only */
    int cut = BEFORE - 1;
    CHECK(cudafd_cancel(n, tok[cut]) == CUDAFD_OK, "mech %d: cancel across the wrap", mech);
    CHECK(cudafd_cancel(n, tok[cut]) == CUDAFD_E_UNKNOWN_TOKEN, "mech %d: a second cancel", mech);

    cudafd_completion got[N];
    int have = collect(n, got, N - 1, 10.0);
    have += collect(n, got + have, N - have, 0.2); /* anything more would be the cancelled one */
    CHECK(have == N - 1, "mech %d: %d reported, %d expected", mech, have, N - 1);
    for (int i = 0, k = 0; i < N && k < have; i++) {
        if (i == cut)
            continue;
        CHECK(got[k].token == tok[i] && got[k].status == 0, "mech %d: report %d is %llx (status %lld), not %llx",
              mech, k, (unsigned long long)got[k].token, (long long)got[k].status, (unsigned long long)tok[i]);
        k++;
    }

    /* A finished wait's slot serves the next waits (the free list is last in,
     * first out): its old token, from before the wrap, stays unknown. */
    uint64_t old = tok[0], again = 0;
    sim_launch(s, 100 * 1000 * 1000, 0);
    CHECK(cudafd_watch_stream(n, (uintptr_t)s, &again) == CUDAFD_OK, "mech %d: watch after the wrap", mech);
    CHECK(again >> SLOT_BITS == N - BEFORE + 1, "mech %d: generation %llu after the wrap", mech,
          (unsigned long long)(again >> SLOT_BITS));
    bool reused = false;
    for (int i = 0; i < N; i++)
        reused |= (again & SLOT_MASK) == (tok[i] & SLOT_MASK);
    CHECK(reused, "mech %d: the new wait got a slot none of the finished ones had", mech);
    for (int i = 0; i < N; i++)
        CHECK(cudafd_cancel(n, tok[i]) == CUDAFD_E_UNKNOWN_TOKEN, "mech %d: finished token %d taken", mech, i);
    CHECK(cudafd_cancel(n, old) == CUDAFD_E_UNKNOWN_TOKEN, "mech %d: the oldest token taken", mech);
    CHECK(cudafd_cancel(n, again) == CUDAFD_OK, "mech %d: cancel the new wait", mech);

    cudafd_notifier_destroy(n);
    sim_stream_destroy(s);

    /* A cancelled wait's record lives until its host function or poller lets
     * go of it; freed during the next mechanism's run, its slot would top the
     * free list there. So the next run starts with none alive. */
    int64_t st[CUDAFD_STAT_COUNT];
    double deadline = now_s() + 10.0;
    while (cudafd_stats(st, CUDAFD_STAT_COUNT) && (st[3] || st[7]) && now_s() < deadline)
        usleep(1000);
    CHECK(st[3] == 0 && st[7] == 0, "mech %d: %lld wait records, %lld host functions left", mech, (long long)st[3],
          (long long)st[7]);
}

int main(void)
{
    sim_calls_load("token_wrap");
    CUcontext ctx = NULL;
    sim_ctx_create(0, &ctx);
    const int mechs[] = {CUDAFD_MECH_EVENT, CUDAFD_MECH_HOSTFUNC, CUDAFD_MECH_SPIN};
    for (int m = 0; m < 3; m++)
        across_the_wrap(mechs[m], ctx);
    sim_ctx_destroy(ctx);

    int64_t st[CUDAFD_STAT_COUNT];
    double deadline = now_s() + 10.0;
    int live;
    do {
        cudafd_release_idle();
        cudafd_stats(st, CUDAFD_STAT_COUNT);
        live = 0;
        for (int i = 0; i <= 7; i++) /* the live counts */
            live += st[i] != 0;
    } while (live && now_s() < deadline && usleep(10000) == 0);
    for (int i = 0; i <= 7; i++)
        CHECK(st[i] == 0, "%s = %lld at the end", cudafd_stat_name(i), (long long)st[i]);
    printf("token_wrap: %d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
