/*
 * common.h - what the C benchmarks (latency.c, enqueue_cost.c) share: the
 * slice of the driver API they call, bound at run time from the very library
 * libcudafd loaded (no CUDA toolkit needed); the setup of the device's
 * primary context, the cudafd_spin kernel and one non-blocking stream; and
 * small helpers (clock, percentiles, options, epoll).
 *
 * Each program defines `const char bench_prog[]`, its name in messages.
 * Include after `#define _GNU_SOURCE`.
 */
#ifndef BENCH_COMMON_H
#define BENCH_COMMON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cudafd.h"

/* ---- the slice of the driver API used here (the driver's stable ABI) ---- */
typedef int CUresult;
typedef int CUdevice;
typedef void *CUcontext, *CUstream, *CUevent, *CUmodule, *CUfunction;
typedef unsigned long long CUdeviceptr;
typedef void (*CUhostFn)(void *);

#define CUDA_ERROR_NOT_READY 600
#define EV_SPIN 0x2     /* CU_EVENT_DISABLE_TIMING: cuEventSynchronize spins */
#define EV_BLOCKING 0x3 /* | CU_EVENT_BLOCKING_SYNC: it sleeps */
#define EV_TIMING 0x0

/* Entry points marked optional are NULL where the driver lacks them (the
 * simulator has no cuEventElapsedTime, stream memory operations or mapped
 * host memory); the others are required: load_driver() dies without them. */
struct bench_driver {
    CUresult (*cuInit)(unsigned);
    CUresult (*cuDeviceGet)(CUdevice *, int);
    CUresult (*cuDeviceGetName)(char *, int, CUdevice);
    CUresult (*cuDevicePrimaryCtxRetain)(CUcontext *, CUdevice);
    CUresult (*cuDevicePrimaryCtxRelease)(CUdevice);
    CUresult (*cuCtxSetCurrent)(CUcontext);
    CUresult (*cuCtxSynchronize)(void);
    CUresult (*cuStreamCreate)(CUstream *, unsigned);
    CUresult (*cuStreamDestroy)(CUstream);
    CUresult (*cuEventCreate)(CUevent *, unsigned);
    CUresult (*cuEventDestroy)(CUevent);
    CUresult (*cuEventRecord)(CUevent, CUstream);
    CUresult (*cuEventQuery)(CUevent);
    CUresult (*cuEventSynchronize)(CUevent);
    CUresult (*cuModuleLoadData)(CUmodule *, const void *);
    CUresult (*cuModuleGetFunction)(CUfunction *, CUmodule, const char *);
    CUresult (*cuLaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,
                               unsigned, unsigned, CUstream, void **, void **);
    /* optional */
    CUresult (*cuDeviceGetAttribute)(int *, int, CUdevice);
    CUresult (*cuStreamQuery)(CUstream);
    CUresult (*cuEventElapsedTime)(float *, CUevent, CUevent);
    CUresult (*cuLaunchHostFunc)(CUstream, CUhostFn, void *);
    CUresult (*cuStreamWriteValue32)(CUstream, CUdeviceptr, uint32_t, unsigned);
    CUresult (*cuMemHostAlloc)(void **, size_t, unsigned);
    CUresult (*cuMemHostGetDevicePointer)(CUdeviceptr *, void *, unsigned);
    CUresult (*cuMemFreeHost)(void *);
};
extern struct bench_driver cu;

extern const char bench_prog[]; /* defined by each program */

/* Set by bench_setup(): the device 0, its name, the kernel, the stream. */
extern CUdevice bench_dev;
extern char bench_device_name[256];
extern CUfunction spin_fn;
extern CUstream stream;

double now_s(void);                       /* CLOCK_MONOTONIC, seconds */
void die(const char *what, const char *why); /* message on stderr, exit 2 */

/* A setup step that must succeed: dies with the driver's error name. */
#define SETUP(call)                                                                                \
    do {                                                                                           \
        CUresult rc_ = (call);                                                                     \
        if (rc_)                                                                                   \
            die(#call, cudafd_cuda_error_name(rc_));                                               \
    } while (0)

/* Load the driver through libcudafd, then bind `cu` from the same library. */
void load_driver(void);
/* The whole file, NUL-terminated (free it); dies if unreadable. */
char *read_file(const char *path);
/* cuInit, device 0, its primary context made current, the cudafd_spin
 * kernel from `ptx`, one non-blocking stream. Dies on failure. */
void bench_setup(const char *ptx);
/* Destroy the stream and release the primary context. */
void bench_teardown(void);
/* Launch cudafd_spin on `s`: it spins for `ns` ns on the GPU (0: empty). */
CUresult launch(CUstream s, uint64_t ns);

int cmp_double(const void *a, const void *b); /* for qsort, ascending */
/* Quantile q of n sorted samples, interpolated. */
double pct(const double *sorted, int n, double q);

/* "--name value" options; the default where absent. */
int arg_int(int argc, char **argv, const char *name, int dflt);
double arg_double(int argc, char **argv, const char *name, double dflt);
const char *arg_str(int argc, char **argv, const char *name, const char *dflt);

void add_to_epoll(int ep, int fd); /* EPOLLIN, level-triggered; dies on failure */
/* Wait until the one fd of the epoll set `ep` is readable: 0, or -1 after timeout_s. */
int wait_fd(int ep, double timeout_s);

/* One step of a spin loop: tells the core a spinning thread waits. */
static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

#endif /* BENCH_COMMON_H */
