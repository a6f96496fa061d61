/*
 * cudafd_sim.h - a simulated CUDA driver for machines without a GPU.
 *
 * libcudafd_sim.so exports the driver entry points that cudafd and its Python
 * helpers use (see SIM_ENTRY_POINTS in sim_api.c), with the driver's own
 * signatures and error codes, plus the cudafdsim_* calls below to create
 * contexts, launch timed kernels and inject faults.
 *
 * Semantics it reproduces:
 *  - Streams run their operations in order; one scheduler thread stands for
 *    the device and runs every stream's head operation as soon as it can.
 *  - A kernel occupies its stream for its duration. A kernel launched with a
 *    fault makes its context's state sticky: from the moment it ends, every
 *    call on that context (queries, synchronizations, records, launches)
 *    returns the fault; blocking synchronizations in flight return it too.
 *  - Events complete in stream order; cuEventSynchronize really blocks (it
 *    sleeps on a condition variable) until completion, a fault, or the
 *    event's destruction. An event never recorded is complete.
 *  - cuStreamWaitEvent makes a stream wait for the record of an event that
 *    was latest when it was called.
 *  - Host functions run in order on one separate "driver callback" thread
 *    and block their stream until they return. When their context faults,
 *    those already queued run at once (the work before them never finished,
 *    as on an H200), and later launches return the sticky error.
 *  - Host notifications (host functions, records of BLOCKING_SYNC events)
 *    are few: with CUDAFDSIM_NOTIFY_MAX of a context's in flight, the call
 *    that would add one blocks until one is retired, and every other call
 *    that enqueues work in that context waits behind it, as an H200 does
 *    (bench/scale_watch.py).
 *  - Every CUDAFDSIM_STREAM_BLOCK-th stream a context creates blocks until
 *    the context has no work queued, and every call that enqueues work in it
 *    waits behind it meanwhile, as on an H200, where about every 128th stream
 *    of a process does (bench/hostfunc_stall.py).
 *  - Handles are checked: a destroyed or made-up stream or event gives
 *    CUDA_ERROR_INVALID_HANDLE, a destroyed context
 *    CUDA_ERROR_CONTEXT_IS_DESTROYED (never a crash).
 *  - Stream handles 0 and CU_STREAM_LEGACY mean the current context's default
 *    stream; CU_STREAM_PER_THREAD means the calling thread's own stream in
 *    the current context.
 *  - NvSciSync and the host1x fence device, for the syncfd mechanism
 *    (sim_nvsci.c): the library exports the NvSciSync calls the core uses
 *    and a fake device (cudafdsim_host1x_open/ioctl/close/ack); the core
 *    takes them with $CUDAFD_SYNCFD_FAKE=<this library>. Each NvSciSync
 *    object is a 32-bit syncpoint starting at $CUDAFD_SIM_SYNCPOINT_START
 *    (default 0), advanced when a stream runs its
 *    cuSignalExternalSemaphoresAsync; the fds are real ones (a sync_file is
 *    a socket, the pollfd an eventfd). A sync_file turns readable once its
 *    threshold passes or, as the kernel's does, at its timeout, passed or
 *    not: $CUDAFD_SIM_FENCE_TIMEOUT_MS after it was made (default 30000).
 *    $CUDAFD_SIM_SYNCFD_FAIL=<step> fails one step of the core's probe.
 *  - A faulting kernel faults every context alive at the time, as on two
 *    H200s of one host; $CUDAFD_SIM_FAULT_SCOPE=context faults its own
 *    context only.
 *  - $CUDAFD_SIM_LATE_FAULT_MS=N: a cuEventSynchronize already blocked when
 *    its context faults returns the fault N ms after the fault instead of at
 *    once, as on an H200 where it waits for its own stream to drain.
 *  - $CUDAFD_SIM_DRIVER_VERSION=N (e.g. 11040): cuDriverGetVersion reports N
 *    (default 13000) and cuGetProcAddress / cuGetProcAddress_v2 act as that
 *    driver's (sim_api.c), so the entry-point lookup of old drivers can be
 *    tested; cudafdsim_legacy_calls() tells whether legacy exports were bound.
 *  - Devices: $CUDAFD_SIM_DEVICES of them (default 2), named
 *    "cudafd simulated GPU <n>". Each has a primary context.
 *  - cuModuleLoadData accepts any image; cuModuleGetFunction finds
 *    "cudafd_spin", a kernel with parameters (uint64_t ns, uint32_t fault):
 *    cuLaunchKernel runs it for ns nanoseconds, and if fault != 0 it faults
 *    the context with CUDA_ERROR_ILLEGAL_ADDRESS, as the real kernel of that
 *    name does on a GPU.
 */
#ifndef CUDAFD_SIM_H
#define CUDAFD_SIM_H

#include "../cuda_abi.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CUDAFDSIM_ABI_VERSION 1
#define CUDAFDSIM_NOTIFY_MAX 24 /* a context's host notifications in flight (the H200 stalled at 17-40) */
#define CUDAFDSIM_STREAM_BLOCK 128 /* every this many streams a context creates, one waits for it to drain */
int cudafdsim_abi_version(void);

/* A new context on device `dev`, not made current anywhere. */
CUresult cudafdsim_ctx_create(CUdevice dev, CUcontext *ctx);
/* Destroy a context created by cudafdsim_ctx_create with its streams and events;
 * blocked synchronizations on it return CUDA_ERROR_CONTEXT_IS_DESTROYED. */
CUresult cudafdsim_ctx_destroy(CUcontext ctx);
/* Enqueue a kernel running for duration_ns on `stream`; if fault != 0 (a
 * CUresult), the context faults with it when the kernel ends. */
CUresult cudafdsim_launch(CUstream stream, uint64_t duration_ns, CUresult fault);
/* The context's sticky fault (0 if none); CUDA_ERROR_INVALID_CONTEXT if unknown. */
CUresult cudafdsim_ctx_fault(CUcontext ctx, CUresult *fault);

/* Calls so far to the legacy exports of the entry points whose ABI changed
 * (plain cuCtxPushCurrent, cuCtxPopCurrent, cuCtxCreate, cuCtxDestroy,
 * cuStreamDestroy, cuEventDestroy, cuDevicePrimaryCtxRelease), which a
 * caller gets from dlsym of the plain name or from cuGetProcAddress asked for
 * a version older than the _v2 one. They behave as their _v2 forms. */
int64_t cudafdsim_legacy_calls(void);

/* Make the next cuSignalExternalSemaphoresAsync fail with r (a syncfd test's
 * stand-in for a semaphore whose context the driver destroyed). */
void cudafdsim_fail_next_signal(CUresult r);
/* Make the fake host1x device's next CREATE_FENCE fail with errno err (as
 * one does when the process is out of fds). */
void cudafdsim_fail_next_fence(int err);
/* Make the next cuLaunchHostFunc sleep ns before it enqueues, as a real one
 * blocks while the driver's host notifications are spent. */
void cudafdsim_delay_next_host_launch(uint64_t ns);
/* Make the next cuEventQuery sleep ns before it looks at its event, as a
 * thread descheduled inside the call would. */
void cudafdsim_delay_next_query(uint64_t ns);
/* Make the next cuEventRecord sleep ns after it enqueued the record, before
 * it returns, as a thread descheduled there would. */
void cudafdsim_delay_after_next_record(uint64_t ns);
/* 1 while that delay is set and no cuEventRecord has taken it yet, else 0. */
int cudafdsim_record_delay_armed(void);

/* Live counts, for leak checks: 0 contexts (created, not destroyed; primary
 * contexts count while retained), 1 streams, 2 events, 3 queued operations,
 * 4 host functions run, 5 kernels run, 6 calls given a dead event: destroyed,
 * or gone with its context (a real driver crashes on one, or answers about
 * the event that took its handle), or destroying an external semaphore of a
 * destroyed context, 7 external semaphores destroyed while a signal of theirs
 * had not run (CUDA forbids it). Returns how many were filled. */
#define CUDAFDSIM_STAT_COUNT 8
int cudafdsim_stats(int64_t *out, int n);

#ifdef __cplusplus
}
#endif
#endif /* CUDAFD_SIM_H */
