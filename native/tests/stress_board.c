/*
 * stress_board.c - the answer board (cudafd_board_*), against the simulator:
 * bad input, an answer only once the stream really passed the point, never
 * while it runs or after a fault, drop and unbind stopping its queries,
 * the thread parking, exiting when idle and restarting on a want, and
 * threads announcing, dropping and rebinding on one board at once.
 */
#include <pthread.h>
#include <time.h>
#include <unistd.h>

#include "stress.h"

static int64_t board_stat(cudafd_board *b, int index)
{
    int64_t st[CUDAFD_BOARD_STAT_COUNT];
    cudafd_board_stats(b, st, CUDAFD_BOARD_STAT_COUNT);
    return st[index];
}

static uint32_t word(const uint32_t *words, int slot) { return __atomic_load_n(&words[slot], __ATOMIC_ACQUIRE); }

static int64_t threads_now(void)
{
    int64_t st[1];
    cudafd_stats(st, 1);
    return st[0];
}

/* Wait until cudafd's live thread count is `n` (the core's threads exit when idle). */
static bool threads_reach(int64_t n, double timeout)
{
    double end = now_s() + timeout;
    while (threads_now() != n && now_s() < end)
        usleep(1000);
    return threads_now() == n;
}

/* Spin until done[slot] reaches w (modulo 2^32) or timeout; true if it did. */
static bool answered(const uint32_t *done, int slot, uint32_t w, double timeout)
{
    double end = now_s() + timeout;
    while ((uint32_t)(word(done, slot) - w) >= 0x80000000u) {
        if (now_s() > end)
            return false;
        usleep(20);
    }
    return true;
}

static void test_board_input(CUcontext ctx)
{
    cudafd_board *b = NULL;
    const uint32_t *want, *done;
    CHECK(cudafd_board_create(0, &b) == CUDAFD_E_INVALID && !b, "no slots");
    CHECK(cudafd_board_create(4, NULL) == CUDAFD_E_INVALID, "NULL out");
    CHECK(cudafd_board_bind(NULL, 1000) == CUDAFD_E_INVALID, "NULL board");
    CHECK(cudafd_board_want(NULL, 0) == CUDAFD_E_INVALID, "NULL board want");
    cudafd_board_destroy(NULL);
    CHECK(cudafd_board_create(2, &b) == CUDAFD_OK && b, "create");
    CHECK(cudafd_board_words(b, &want, &done) == 2, "words");
    CHECK(cudafd_board_words(b, NULL, &done) == CUDAFD_E_INVALID, "words NULL");
    for (uintptr_t s = 0; s <= 2; s++)
        CHECK(cudafd_board_bind(b, s) == CUDAFD_E_INVALID, "default stream %lu bound", (unsigned long)s);
    CHECK(cudafd_board_want(b, 0) == CUDAFD_E_INVALID, "want on an unbound slot");
    CHECK(cudafd_board_want(b, -1) == CUDAFD_E_INVALID, "want on slot -1");
    CHECK(cudafd_board_want(b, 2) == CUDAFD_E_INVALID, "want past the end");
    CHECK(cudafd_board_drop(b, 0) == CUDAFD_E_INVALID, "drop of an unbound slot");
    CUstream s = new_stream(ctx);
    int a = cudafd_board_bind(b, (uintptr_t)s), c = cudafd_board_bind(b, (uintptr_t)s);
    CHECK(a >= 0 && c >= 0 && a != c, "two slots: %d %d", a, c);
    CHECK(cudafd_board_bind(b, (uintptr_t)s) == CUDAFD_E_NOMEM, "a full board");
    CHECK(cudafd_board_unbind(b, a) == CUDAFD_OK, "unbind");
    CHECK(cudafd_board_unbind(b, a) == CUDAFD_E_INVALID, "unbind twice");
    CHECK(cudafd_board_want(b, a) == CUDAFD_E_INVALID, "want after unbind");
    CHECK(cudafd_board_bind(b, (uintptr_t)s) == a, "an unbound slot is reused");
    CHECK(board_stat(b, CUDAFD_BOARD_STARTS) == 0, "no want, no thread");
    cudafd_board_destroy(b);
    sim_stream_destroy(s);
}

/* Each answer comes only once the stream passed the point: the stream is idle
 * then (nothing else is launched on it), and a point still running is never
 * answered. */
static void test_board_answers(CUcontext ctx)
{
    cudafd_board *b;
    const uint32_t *want, *done;
    cudafd_board_create(8, &b);
    cudafd_board_words(b, &want, &done);
    CUstream s = new_stream(ctx);
    int slot = cudafd_board_bind(b, (uintptr_t)s);
    CHECK(threads_reach(0, 5.0), "the core's threads did not exit: %lld", (long long)threads_now());
    int64_t before = 0;
    int early = 0, late = 0;
    for (int i = 0; i < 300; i++) {
        sim_launch(s, (uint64_t)(i % 7) * 60000, 0); /* 0-360 us */
        int64_t w = cudafd_board_want(b, slot);
        CHECK(w == word(want, slot), "want returns the word: %lld %u", (long long)w, word(want, slot));
        if (!answered(done, slot, (uint32_t)w, 2.0)) {
            late++;
            continue;
        }
        early += !cudafd_stream_done((uintptr_t)s);
    }
    CHECK(late == 0, "%d points never answered", late);
    CHECK(early == 0, "%d points answered while their stream still ran", early);
    CHECK(threads_now() == before + 1, "one board thread while busy (%lld -> %lld)", (long long)before,
          (long long)threads_now());
    /* a long point: not answered while it runs */
    sim_launch(s, 30 * 1000 * 1000, 0);
    int64_t w = cudafd_board_want(b, slot);
    usleep(10000);
    CHECK(word(done, slot) != (uint32_t)w, "answered 10 ms into a 30 ms kernel");
    CHECK(answered(done, slot, (uint32_t)w, 2.0), "the 30 ms kernel never answered");
    int64_t q = board_stat(b, CUDAFD_BOARD_QUERIES), n = board_stat(b, CUDAFD_BOARD_ANSWERS);
    CHECK(n == 301, "answers %lld, not one per point", (long long)n);
    CHECK(q < 301 * 8, "queries %lld for 301 points: the pacing does not work", (long long)q);
    /* idle: the thread parks, then exits, and a want starts it again */
    CHECK(threads_reach(before, 2.0), "the board thread did not exit when idle");
    int64_t starts = board_stat(b, CUDAFD_BOARD_STARTS);
    sim_launch(s, 100000, 0);
    w = cudafd_board_want(b, slot);
    CHECK(board_stat(b, CUDAFD_BOARD_STARTS) == starts + 1, "a want after idle restarts the thread");
    CHECK(answered(done, slot, (uint32_t)w, 2.0), "no answer after the restart");
    printf("stress: board: %lld queries for %lld answers, %lld starts\n", (long long)board_stat(b, 0),
           (long long)board_stat(b, 1), (long long)board_stat(b, 2));
    cudafd_board_destroy(b);
    CHECK(threads_now() == before, "destroy left the thread running");
    sim_stream_destroy(s);
}

/* drop: no query once it returns; a fault is never answered; destroy with a
 * want pending returns and stops the thread. */
static void test_board_drop_fault(void)
{
    CUcontext ctx;
    sim_ctx_create(0, &ctx);
    cudafd_board *b;
    const uint32_t *want, *done;
    cudafd_board_create(4, &b);
    cudafd_board_words(b, &want, &done);
    CUstream s = new_stream(ctx), f = new_stream(ctx);
    int slot = cudafd_board_bind(b, (uintptr_t)s), fs = cudafd_board_bind(b, (uintptr_t)f);
    sim_launch(s, 200 * 1000 * 1000, 0);
    int64_t w = cudafd_board_want(b, slot);
    usleep(2000);
    CHECK(cudafd_board_drop(b, slot) == CUDAFD_OK, "drop");
    CHECK(word(done, slot) == word(want, slot) && word(want, slot) == (uint32_t)w, "drop settles the slot");
    int64_t q = board_stat(b, CUDAFD_BOARD_QUERIES);
    usleep(5000);
    CHECK(board_stat(b, CUDAFD_BOARD_QUERIES) == q, "queries after drop: %lld -> %lld", (long long)q,
          (long long)board_stat(b, CUDAFD_BOARD_QUERIES));
    int64_t answers = board_stat(b, CUDAFD_BOARD_ANSWERS);
    sim_launch(f, 1000000, CUDA_ERROR_ILLEGAL_ADDRESS);
    int64_t wf = cudafd_board_want(b, fs);
    usleep(20000);
    CHECK(word(done, fs) != (uint32_t)wf && board_stat(b, CUDAFD_BOARD_ANSWERS) == answers, "a fault answered");
    sim_launch(s, 200 * 1000 * 1000, 0); /* the context faulted: this fails at once; nothing answers */
    cudafd_board_want(b, slot);
    double t0 = now_s();
    cudafd_board_destroy(b); /* with two wants pending */
    CHECK(now_s() - t0 < 0.1, "destroy took %.3f s", now_s() - t0);
    sim_stream_destroy(s);
    sim_stream_destroy(f);
    sim_ctx_destroy(ctx);
}

typedef struct {
    cudafd_board *b;
    CUcontext ctx;
    int early, late, rounds;
} board_arg;

/* Announce, wait for the answer or drop, now and then unbind and bind anew. */
static void *board_worker(void *p)
{
    board_arg *a = p;
    const uint32_t *want, *done;
    cudafd_board_words(a->b, &want, &done);
    CUstream s = new_stream(a->ctx);
    int slot = cudafd_board_bind(a->b, (uintptr_t)s);
    uint32_t r = (uint32_t)(uintptr_t)s;
    for (int i = 0; i < a->rounds && slot >= 0; i++) {
        r = r * 1103515245u + 12345u;
        sim_launch(s, (r >> 8) % 200000, 0);
        int64_t w = cudafd_board_want(a->b, slot);
        if ((r >> 4) % 5 == 0) {
            cudafd_board_drop(a->b, slot);
        } else if (!answered(done, slot, (uint32_t)w, 2.0)) {
            a->late++;
        } else {
            a->early += !cudafd_stream_done((uintptr_t)s);
        }
        if ((r >> 12) % 17 == 0) {
            cudafd_board_unbind(a->b, slot);
            slot = cudafd_board_bind(a->b, (uintptr_t)s);
        }
    }
    if (slot >= 0)
        cudafd_board_unbind(a->b, slot);
    cudafd_stream_done((uintptr_t)s);
    sim_stream_destroy(s);
    return NULL;
}

static void test_board_threads(CUcontext ctx)
{
    cudafd_board *b;
    cudafd_board_create(16, &b);
    board_arg args[6];
    pthread_t th[6];
    for (int i = 0; i < 6; i++) {
        args[i] = (board_arg){b, ctx, 0, 0, 200};
        pthread_create(&th[i], NULL, board_worker, &args[i]);
    }
    int early = 0, late = 0;
    for (int i = 0; i < 6; i++) {
        pthread_join(th[i], NULL);
        early += args[i].early;
        late += args[i].late;
    }
    CHECK(early == 0 && late == 0, "threads: %d answered early, %d never", early, late);
    cudafd_board_destroy(b);
}

void test_board_all(CUcontext ctx)
{
    test_board_input(ctx);
    test_board_answers(ctx);
    test_board_drop_fault();
    test_board_threads(ctx);
}
