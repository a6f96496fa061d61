/*
 * nvsci_abi.h - the slice of the NvSciSync library ABI and of the host1x
 * fence device's ioctls that the syncfd mechanism and its fakes use.
 *
 * cudafd has no build-time dependency on NVIDIA's Tegra packages: it dlopen()s
 * libnvscisync.so at run time (native/core/syncfd.c), and the simulator
 * provides fakes of both (native/sim/sim_nvsci.c). The numbers restated here:
 *  - NvSciSync (nvscisync.h, NvSciSync 2.x): an NvSciError of 0 is success;
 *    a fence is six 64-bit words; attribute keys count up from LowerBound (0):
 *    NeedCpuAccess 1, RequiredPerm 2, ActualPerm 3, ..., PrimitiveInfo 10;
 *    the primitive type Syncpoint is 1; the WaitOnly permission is bit 0,
 *    SignalOnly bit 1. These come from the public header of NvSciSync 2.8
 *    and have not been checked against a board's library (docs/jetson.md).
 *  - host1x fence device (/dev/host1x-fence, include/uapi/linux/host1x-fence.h
 *    of NVIDIA's L4T kernel modules): CREATE_FENCE _IOWR('X', 0x02,
 *    {u32 id; u32 threshold; s32 fence_fd; u32 reserved[1]}) gives a
 *    sync_file fd; CREATE_POLLFD _IOWR('X', 0x10, {s32 fd; u32 reserved[1]})
 *    gives a pollfd; TRIGGER_POLLFD _IOWR('X', 0x11, {s32 fd; u32 id;
 *    u32 threshold; u32 reserved[1]}) arms it. A pollfd is readable
 *    (POLLIN|POLLPRI) when an armed threshold has passed, and the poll that
 *    reports it forgets the thresholds it found passed: it says "something
 *    passed", never which. Reserved words must be zero.
 *  - Syncpoints are 32-bit counters that wrap: a threshold t has passed when
 *    (int32_t)(value - t) >= 0.
 */
#ifndef CUDAFD_NVSCI_ABI_H
#define CUDAFD_NVSCI_ABI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/ioctl.h>

typedef int NvSciError;
#define NvSciError_Success 0
typedef struct NvSciSyncModuleRec *NvSciSyncModule;
typedef struct NvSciSyncAttrListRec *NvSciSyncAttrList;
typedef struct NvSciSyncObjRec *NvSciSyncObj;
typedef struct NvSciSyncFence {
    uint64_t payload[6];
} NvSciSyncFence;
typedef struct {
    int attrKey;
    const void *value;
    size_t len;
} NvSciSyncAttrKeyValuePair;

#define NvSciSyncAttrKey_NeedCpuAccess 1
#define NvSciSyncAttrKey_RequiredPerm 2
#define NvSciSyncAttrKey_ActualPerm 3
#define NvSciSyncAttrKey_PrimitiveInfo 10
#define NvSciSyncAttrValPrimitiveType_Syncpoint 1
#define NvSciSyncAttrValPrimitiveType_SysmemSemaphore 2
#define NvSciSyncAccessPerm_WaitOnly ((uint64_t)1 << 0)
#define NvSciSyncAccessPerm_SignalOnly ((uint64_t)1 << 1)

/* The NvSciSync calls used, X(name, return, params). */
#define CUDAFD_NVSCISYNC_CALLS(X)                                                                  \
    X(NvSciSyncModuleOpen, NvSciError, (NvSciSyncModule * module))                                 \
    X(NvSciSyncModuleClose, void, (NvSciSyncModule module))                                        \
    X(NvSciSyncAttrListCreate, NvSciError, (NvSciSyncModule module, NvSciSyncAttrList * list))     \
    X(NvSciSyncAttrListFree, void, (NvSciSyncAttrList list))                                       \
    X(NvSciSyncAttrListSetAttrs, NvSciError,                                                       \
      (NvSciSyncAttrList list, const NvSciSyncAttrKeyValuePair *pairs, size_t count))              \
    X(NvSciSyncAttrListGetAttrs, NvSciError,                                                       \
      (NvSciSyncAttrList list, NvSciSyncAttrKeyValuePair *pairs, size_t count))                    \
    X(NvSciSyncAttrListReconcile, NvSciError,                                                      \
      (const NvSciSyncAttrList inputs[], size_t count, NvSciSyncAttrList *reconciled,              \
       NvSciSyncAttrList *conflicts))                                                              \
    X(NvSciSyncObjAlloc, NvSciError, (NvSciSyncAttrList reconciled, NvSciSyncObj * obj))           \
    X(NvSciSyncObjFree, void, (NvSciSyncObj obj))                                                  \
    X(NvSciSyncFenceExtractFence, NvSciError,                                                      \
      (const NvSciSyncFence *fence, uint64_t *id, uint64_t *value))                                \
    X(NvSciSyncFenceClear, void, (NvSciSyncFence * fence))

struct cfd_host1x_create_fence {
    uint32_t id;
    uint32_t threshold;
    int32_t fence_fd;
    uint32_t reserved[1];
};
struct cfd_host1x_create_pollfd {
    int32_t fd;
    uint32_t reserved[1];
};
struct cfd_host1x_trigger_pollfd {
    int32_t fd;
    uint32_t id;
    uint32_t threshold;
    uint32_t reserved[1];
};
#define CFD_HOST1X_IOCTL_CREATE_FENCE _IOWR('X', 0x02, struct cfd_host1x_create_fence)
#define CFD_HOST1X_IOCTL_CREATE_POLLFD _IOWR('X', 0x10, struct cfd_host1x_create_pollfd)
#define CFD_HOST1X_IOCTL_TRIGGER_POLLFD _IOWR('X', 0x11, struct cfd_host1x_trigger_pollfd)
#define CFD_HOST1X_DEVICE "/dev/host1x-fence"

/* The fake device's entry points (libcudafd_sim.so), with the signatures of
 * open(2), ioctl(2), close(2); `ack` clears a fake pollfd after a wake (a
 * real pollfd's poll() clears it by itself). */
#define CUDAFD_HOST1X_FAKE_CALLS(X)                                                                \
    X(cudafdsim_host1x_open, int, (const char *path, int flags))                                   \
    X(cudafdsim_host1x_ioctl, int, (int fd, unsigned long request, void *arg))                     \
    X(cudafdsim_host1x_close, int, (int fd))                                                       \
    X(cudafdsim_host1x_ack, void, (int pollfd))

/* Has threshold t passed at counter value v? Syncpoints wrap at 32 bits. */
static inline bool cfd_syncpt_passed(uint32_t v, uint32_t t) { return (int32_t)(v - t) >= 0; }

#endif /* CUDAFD_NVSCI_ABI_H */
