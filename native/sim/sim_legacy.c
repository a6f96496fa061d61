/*
 * sim_legacy.c - the legacy exports of the entry points whose ABI changed.
 *
 * A driver exports each such entry point twice: the plain name is the first
 * ABI (before CUDA 3.2/4.0, or 11.0 for cuDevicePrimaryCtxRelease) and the
 * _v2 name the current one; cuGetProcAddress hands out the _v2 one for every
 * version from its introduction on. Code that binds the plain name by dlsym,
 * or asks cuGetProcAddress for an older version, gets the legacy one. Here
 * the legacy exports do what their _v2 counterparts do and count their calls
 * (cudafdsim_legacy_calls), so a test can tell which of the two was bound.
 */
#include "sim_internal.h"

#include <string.h>

/* The definitions below are the plain names; the _v2 ones stay declared. */
#undef cuCtxCreate
#undef cuCtxDestroy
#undef cuCtxPushCurrent
#undef cuCtxPopCurrent
#undef cuStreamDestroy
#undef cuEventDestroy
#undef cuDevicePrimaryCtxRelease

static atomic_llong legacy_calls;

static void counted(void)
{
    atomic_fetch_add_explicit(&legacy_calls, 1, memory_order_relaxed);
}

SIM_API CUresult cuCtxCreate(CUcontext *ctx, unsigned int flags, CUdevice dev)
{
    counted();
    return cuCtxCreate_v2(ctx, flags, dev);
}

SIM_API CUresult cuCtxDestroy(CUcontext ctx)
{
    counted();
    return cuCtxDestroy_v2(ctx);
}

SIM_API CUresult cuCtxPushCurrent(CUcontext ctx)
{
    counted();
    return cuCtxPushCurrent_v2(ctx);
}

SIM_API CUresult cuCtxPopCurrent(CUcontext *ctx)
{
    counted();
    return cuCtxPopCurrent_v2(ctx);
}

SIM_API CUresult cuStreamDestroy(CUstream stream)
{
    counted();
    return cuStreamDestroy_v2(stream);
}

SIM_API CUresult cuEventDestroy(CUevent event)
{
    counted();
    return cuEventDestroy_v2(event);
}

SIM_API CUresult cuDevicePrimaryCtxRelease(CUdevice dev)
{
    counted();
    return cuDevicePrimaryCtxRelease_v2(dev);
}

void *sim_legacy_entry(const char *name)
{
#define SIM_LEGACY_ROW(fn, since, params)                                      \
    if (strcmp(name, #fn) == 0)                                                \
        return (void *)fn;
    SIM_VERSIONED(SIM_LEGACY_ROW)
#undef SIM_LEGACY_ROW
    return NULL;
}

SIM_API int64_t cudafdsim_legacy_calls(void)
{
    return atomic_load_explicit(&legacy_calls, memory_order_relaxed);
}
