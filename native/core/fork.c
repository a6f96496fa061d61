/*
 * fork.c - what a child made by fork() gets, and the conditions the core's
 * threads sleep on, made at load and anew in a child.
 *
 * Facts relied on: fork() copies only the thread that calls it, so a child
 * has none of the core's threads (poller, watchdog) nor
 * the driver's, and its copy of a lock is in whatever state another thread
 * of the parent left it. CUDA cannot be used in a child forked after its
 * parent initialised the driver: the driver's state there describes the
 * parent's device resources (the CUDA programming guide; on the simulator
 * the child has the state but not the threads that run its streams).
 *
 * So the rule is the driver's: a child forked after this library loaded the
 * driver gets CUDAFD_E_STATE, with a message that says what to do, from
 * every call that would reach the driver (cfd_fork_check in driver.c, through
 * cudafd_driver_load, reads the flag set here), and the notifiers it inherited refuse every call but
 * close and destroy, which touch neither the driver nor a lock a parent's
 * thread may have held (their queue's mutex). A child forked before the
 * driver was loaded starts from nothing and works. The parent goes on as if
 * nothing happened: the prepare handler only holds the driver's load lock
 * and g.mu across the fork, so that the child's copies of them and of what
 * they guard are consistent (a fork() during a first load waits for it).
 */
#include <pthread.h>
#include <time.h>

#include "internal.h"

/* g's conditions, at load and anew in a child. The watchdog's timed waits
 * run on CLOCK_MONOTONIC, so a step of the wall clock (NTP, an administrator)
 * neither stretches one into a hang nor ends it early. */
static void init_conds(void)
{
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&g.watchdog_cv, &attr);
    pthread_condattr_destroy(&attr);
    pthread_cond_init(&g.fill_cv, NULL);
    pthread_cond_init(&g.poller_gone_cv, NULL);
}

static void before_fork(void)
{
    cfd_driver_fork_prepare(); /* a load in progress ends first */
    pthread_mutex_lock(&g.mu);
}

static void in_parent(void)
{
    pthread_mutex_unlock(&g.mu);
    cfd_driver_fork_done();
}

static void in_child(void)
{
    g.fork_gen++; /* every notifier made before is inherited now */
    const char *path = cudafd_driver_path();
    if (path && *path)
        __atomic_store_n(&g.forked, true, __ATOMIC_RELEASE);
    /* none of the parent's threads runs here */
    g.poller_running = g.poller_sleeping = false;
    g.watchdog_running = false;
    g.stat[ST_THREADS] = 0;
    init_conds();
    pthread_mutex_unlock(&g.mu);
    cfd_driver_fork_done();
}

__attribute__((constructor)) static void at_load(void)
{
    init_conds();
    pthread_atfork(before_fork, in_parent, in_child);
}
