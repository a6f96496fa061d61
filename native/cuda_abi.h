/*
 * cuda_abi.h - the slice of the CUDA driver ABI that cudafd and its simulator use.
 *
 * cudafd has no build-time dependency on the CUDA toolkit: it loads the driver
 * at run time and resolves entry points through cuGetProcAddress. This header
 * restates the handful of types, constants and signatures involved. The values
 * are the driver's own (they are part of its stable ABI), so the same numbers
 * flow through the real driver and the simulator.
 */
#ifndef CUDAFD_CUDA_ABI_H
#define CUDAFD_CUDA_ABI_H

#include <stdint.h>

typedef int CUresult;
typedef int CUdevice;
typedef struct CUctx_st *CUcontext;
typedef struct CUstream_st *CUstream;
typedef struct CUevent_st *CUevent;
typedef struct CUmod_st *CUmodule;
typedef struct CUfunc_st *CUfunction;
typedef void (*CUhostFn)(void *user_data);

/* CUresult values (subset). */
#define CUDA_SUCCESS                    0
#define CUDA_ERROR_INVALID_VALUE        1
#define CUDA_ERROR_OUT_OF_MEMORY        2
#define CUDA_ERROR_NOT_INITIALIZED      3
#define CUDA_ERROR_DEINITIALIZED        4
#define CUDA_ERROR_NO_DEVICE            100
#define CUDA_ERROR_INVALID_DEVICE       101
#define CUDA_ERROR_INVALID_IMAGE        200
#define CUDA_ERROR_INVALID_CONTEXT      201
#define CUDA_ERROR_INVALID_HANDLE       400
#define CUDA_ERROR_NOT_FOUND            500
#define CUDA_ERROR_NOT_READY            600
#define CUDA_ERROR_ILLEGAL_ADDRESS      700
#define CUDA_ERROR_LAUNCH_TIMEOUT       702
#define CUDA_ERROR_CONTEXT_IS_DESTROYED 709
#define CUDA_ERROR_ASSERT               710
#define CUDA_ERROR_ILLEGAL_INSTRUCTION  715
#define CUDA_ERROR_MISALIGNED_ADDRESS   716
#define CUDA_ERROR_INVALID_PC           718
#define CUDA_ERROR_LAUNCH_FAILED        719
#define CUDA_ERROR_NOT_SUPPORTED        801
#define CUDA_ERROR_UNKNOWN              999

/* Flags. */
#define CU_EVENT_DEFAULT        0x0
#define CU_EVENT_BLOCKING_SYNC  0x1
#define CU_EVENT_DISABLE_TIMING 0x2
#define CU_STREAM_DEFAULT       0x0
#define CU_STREAM_NON_BLOCKING  0x1

/* Special stream handles. */
#define CU_STREAM_LEGACY     ((CUstream)0x1)
#define CU_STREAM_PER_THREAD ((CUstream)0x2)

/* cuGetProcAddress (CUDA 12.0+ signature, exported as cuGetProcAddress_v2). */
#define CU_GET_PROC_ADDRESS_DEFAULT 0
typedef int CUdriverProcAddressQueryResult;
typedef CUresult (*cuGetProcAddress_v2_t)(const char *symbol, void **pfn, int cudaVersion,
                                          uint64_t flags, CUdriverProcAddressQueryResult *status);
/* The CUDA 11 signature, exported as cuGetProcAddress by older drivers. */
typedef CUresult (*cuGetProcAddress_v1_t)(const char *symbol, void **pfn, int cudaVersion,
                                          uint64_t flags);

/* The ABI version cudafd asks cuGetProcAddress for (or the driver's own, if
 * older): the CUDA 12.0 entry points, which every driver from 12.0 on (CUDA 13
 * included) still provides. */
#define CUDAFD_CUDA_API_VERSION 12000

/*
 * X-macro list of the entry points: X(name, return, (params)).
 * "optional" entry points may be missing without failing the load.
 */
#define CUDAFD_DRIVER_ENTRY_POINTS(X)                                                          \
    X(cuInit, (unsigned int flags))                                                            \
    X(cuDriverGetVersion, (int *version))                                                      \
    X(cuGetErrorName, (CUresult error, const char **name))                                     \
    X(cuGetErrorString, (CUresult error, const char **text))                                   \
    X(cuDeviceGetCount, (int *count))                                                          \
    X(cuDeviceGet, (CUdevice * dev, int ordinal))                                              \
    X(cuCtxGetCurrent, (CUcontext * ctx))                                                      \
    X(cuCtxSetCurrent, (CUcontext ctx))                                                        \
    X(cuCtxPushCurrent, (CUcontext ctx))                                                       \
    X(cuCtxPopCurrent, (CUcontext * ctx))                                                      \
    X(cuCtxGetDevice, (CUdevice * dev))                                                        \
    X(cuStreamGetCtx, (CUstream stream, CUcontext * ctx))                                      \
    X(cuStreamCreate, (CUstream * stream, unsigned int flags))                                 \
    X(cuStreamDestroy, (CUstream stream))                                                      \
    X(cuStreamQuery, (CUstream stream))                                                        \
    X(cuStreamWaitEvent, (CUstream stream, CUevent event, unsigned int flags))                 \
    X(cuEventCreate, (CUevent * event, unsigned int flags))                                    \
    X(cuEventDestroy, (CUevent event))                                                         \
    X(cuEventRecord, (CUevent event, CUstream stream))                                         \
    X(cuEventQuery, (CUevent event))                                                           \
    X(cuEventSynchronize, (CUevent event))                                                     \
    X(cuLaunchHostFunc, (CUstream stream, CUhostFn fn, void *user_data))

/*
 * External semaphores (the syncfd mechanism, native/core/syncfd.c). Layouts
 * restated from cuda.h of CUDA 12: a handle description is {type; a union of
 * an fd, two win32 pointers or an NvSciSyncObj; flags; reserved[16]}; signal
 * parameters are {{fence value; nvSciSync fence pointer; keyed-mutex key;
 * reserved[12]}; flags; reserved[16]}.
 */
typedef struct CUextSemaphore_st *CUexternalSemaphore;
#define CU_EXTERNAL_SEMAPHORE_HANDLE_TYPE_NVSCISYNC 6
#define CUDA_NVSCISYNC_ATTR_SIGNAL 0x1
#define CUDA_NVSCISYNC_ATTR_WAIT   0x2
typedef struct CUDA_EXTERNAL_SEMAPHORE_HANDLE_DESC_st {
    int type;
    union {
        int fd;
        struct { void *handle; const void *name; } win32;
        const void *nvSciSyncObj;
    } handle;
    unsigned int flags;
    unsigned int reserved[16];
} CUDA_EXTERNAL_SEMAPHORE_HANDLE_DESC;
typedef struct CUDA_EXTERNAL_SEMAPHORE_SIGNAL_PARAMS_st {
    struct {
        struct { unsigned long long value; } fence;
        union { void *fence; unsigned long long reserved; } nvSciSync;
        struct { unsigned long long key; } keyedMutex;
        unsigned int reserved[12];
    } params;
    unsigned int flags;
    unsigned int reserved[16];
} CUDA_EXTERNAL_SEMAPHORE_SIGNAL_PARAMS;

/* Optional entry points: absent from drivers without NvSciSync (x86), which
 * only makes the syncfd mechanism unavailable (its probe names the step);
 * without the primary context's three, side streams in a primary context
 * hold no reference to it (contexts.c); without cuStreamGetId (before CUDA
 * 12.0) a stream's waits are keyed by its handle alone (watch.c). */
#define CUDAFD_DRIVER_OPTIONAL_ENTRY_POINTS(X)                                                 \
    X(cuStreamGetId, (CUstream stream, unsigned long long *id))                                \
    X(cuDevicePrimaryCtxRetain, (CUcontext * ctx, CUdevice dev))                               \
    X(cuDevicePrimaryCtxRelease, (CUdevice dev))                                               \
    X(cuDevicePrimaryCtxGetState, (CUdevice dev, unsigned int *flags, int *active))            \
    X(cuDeviceGetNvSciSyncAttributes, (void *nvSciSyncAttrList, CUdevice dev, int flags))      \
    X(cuImportExternalSemaphore, (CUexternalSemaphore * sem,                                   \
                                  const CUDA_EXTERNAL_SEMAPHORE_HANDLE_DESC *desc))            \
    X(cuSignalExternalSemaphoresAsync, (const CUexternalSemaphore *sems,                       \
                                        const CUDA_EXTERNAL_SEMAPHORE_SIGNAL_PARAMS *params,   \
                                        unsigned int count, CUstream stream))                  \
    X(cuDestroyExternalSemaphore, (CUexternalSemaphore sem))

#endif /* CUDAFD_CUDA_ABI_H */
