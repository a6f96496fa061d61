/*
 * sim_memops.c - host memory the device writes: cuMemHostRegister and
 * cuStreamWriteValue32.
 *
 * As on a GPU with unified addressing, a registered range's device address
 * is its host address. A write is a stream operation like a record: it lands
 * SIM_WRITE_LAG_NS after the stream reached it (sim_sched.c stores the
 * value then), and the stream goes on to the work after it
 * $CUDAFD_SIM_WRITE_LEAD_US (default SIM_WRITE_LEAD_NS) after that, as on an
 * H200, whose host sees a write up to a few microseconds before events
 * recorded around it read done; a fault drops it with the rest of the queue,
 * so it never runs. A write outside
 * every registered range is refused at the enqueue (a GPU would fault when
 * it ran). $CUDAFD_SIM_NO_STREAM_WRITES makes every write fail with
 * CUDA_ERROR_NOT_SUPPORTED, as on a device without stream memory operations.
 */
#include <stdlib.h>

#include "sim_internal.h"

struct range {
    char *p;
    size_t bytes;
    struct range *next;
};
static struct range *ranges; /* sim.lock */

static struct range *find_locked(const void *p, size_t bytes)
{
    for (struct range *r = ranges; r; r = r->next)
        if ((const char *)p >= r->p && (const char *)p + bytes <= r->p + r->bytes)
            return r;
    return NULL;
}

SIM_API CUresult cuMemHostRegister(void *p, size_t bytes, unsigned int flags)
{
    SIM_CHECK_INIT();
    if (!p || !bytes || (flags & ~(unsigned)(CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP)))
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&sim.lock);
    CUresult rc = CUDA_SUCCESS;
    for (struct range *r = ranges; r; r = r->next)
        if ((char *)p < r->p + r->bytes && r->p < (char *)p + bytes)
            rc = CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
    struct range *r = rc == CUDA_SUCCESS ? malloc(sizeof *r) : NULL;
    if (rc == CUDA_SUCCESS && !r)
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    if (r) {
        *r = (struct range){p, bytes, ranges};
        ranges = r;
    }
    pthread_mutex_unlock(&sim.lock);
    return rc;
}

SIM_API CUresult cuMemHostUnregister(void *p)
{
    SIM_CHECK_INIT();
    pthread_mutex_lock(&sim.lock);
    CUresult rc = CUDA_ERROR_INVALID_VALUE; /* (the driver's "not registered" code differs) */
    for (struct range **link = &ranges; *link; link = &(*link)->next) {
        if ((*link)->p == p) {
            struct range *r = *link;
            *link = r->next;
            free(r);
            rc = CUDA_SUCCESS;
            break;
        }
    }
    pthread_mutex_unlock(&sim.lock);
    return rc;
}

SIM_API CUresult cuMemHostGetDevicePointer(CUdeviceptr *dptr, void *p, unsigned int flags)
{
    SIM_CHECK_INIT();
    if (!dptr || flags)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&sim.lock);
    CUresult rc = find_locked(p, 1) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    if (rc == CUDA_SUCCESS)
        *dptr = (CUdeviceptr)(uintptr_t)p;
    pthread_mutex_unlock(&sim.lock);
    return rc;
}

SIM_API CUresult cuStreamWriteValue32(CUstream stream, CUdeviceptr addr, unsigned int value, unsigned int flags)
{
    SIM_CHECK_INIT();
    if (sim.no_stream_writes)
        return CUDA_ERROR_NOT_SUPPORTED;
    if (flags || (addr & 3))
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&sim.lock);
    struct sim_stream *s = NULL;
    CUresult rc = sim_stream_resolve_locked(stream, &s);
    if (rc == CUDA_SUCCESS && !find_locked((void *)(uintptr_t)addr, sizeof(uint32_t)))
        rc = CUDA_ERROR_INVALID_VALUE;
    if (rc == CUDA_SUCCESS)
        rc = sim_ctx_usable(s->ctx);
    if (rc == CUDA_SUCCESS) {
        struct sim_op *op = sim_op_new(SIM_OP_WRITE);
        if (!op) {
            rc = CUDA_ERROR_OUT_OF_MEMORY;
        } else {
            op->write.addr = (uint32_t *)(uintptr_t)addr;
            op->write.value = value;
            if ((rc = sim_enqueue_locked(s, op)) != CUDA_SUCCESS)
                free(op);
        }
    }
    pthread_mutex_unlock(&sim.lock);
    return rc;
}
