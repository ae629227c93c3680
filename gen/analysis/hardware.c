/* hardware.c — datasheet figures of the GPUs and links lynxgen plans for.
 *
 * One table per kind, indexed by the IR's enums, each row with its source.
 * GPU figures are dense (no sparsity) datasheet peaks; the cost model
 * (cost.c) applies the efficiencies that real kernels reach. Link figures are
 * already effective bandwidths per direction, because that is what a
 * transfer of S bytes divides by; the nominal figure and the factor are in
 * the row's source. A measured profile overrides any of them.
 *
 * Memory is the datasheet's "GB" read as 10^9 bytes. The cards really hold
 * that many GiB (7% more), but the CUDA context, cuBLAS workspaces and NCCL
 * buffers take a few GB of it before lynxgen's arena is allocated, so the
 * decimal figure is a usable budget rather than an optimistic one. */
#include "analysis/cost.h"

#include <stddef.h>

#define GB 1e9
#define TFLOPS 1e12
#define US 1e-6

static const lx_gpu_spec gpu_specs[] = {
    [LX_GPU_V100_32GB] =
        {"V100-SXM2-32GB", 32 * GB, 125 * TFLOPS, 15.7 * TFLOPS, 900 * GB, LX_LINK_NVLINK2,
         "NVIDIA Tesla V100 datasheet (SXM2 32GB): 125 TFLOP/s fp16 tensor, 15.7 TFLOP/s fp32, "
         "900 GB/s HBM2, NVLink 2 300 GB/s total"},
    [LX_GPU_A100_40GB] = {"A100-SXM4-40GB", 40 * GB, 312 * TFLOPS, 19.5 * TFLOPS, 1555 * GB, LX_LINK_NVLINK3,
                          "NVIDIA A100 datasheet (SXM4 40GB): 312 TFLOP/s bf16 dense, 19.5 TFLOP/s fp32, "
                          "1555 GB/s HBM2, NVLink 3 600 GB/s total"},
    [LX_GPU_A100_80GB] = {"A100-SXM4-80GB", 80 * GB, 312 * TFLOPS, 19.5 * TFLOPS, 2039 * GB, LX_LINK_NVLINK3,
                          "NVIDIA A100 datasheet (SXM4 80GB): 312 TFLOP/s bf16 dense, 19.5 TFLOP/s fp32, "
                          "2039 GB/s HBM2e, NVLink 3 600 GB/s total"},
    [LX_GPU_H100_80GB] = {"H100-SXM5-80GB", 80 * GB, 989 * TFLOPS, 67 * TFLOPS, 3350 * GB, LX_LINK_NVLINK4,
                          "NVIDIA H100 datasheet (SXM5): 989 TFLOP/s bf16 dense, 67 TFLOP/s fp32, "
                          "3.35 TB/s HBM3, NVLink 4 900 GB/s total"},
    [LX_GPU_H200_141GB] = {"H200-SXM-141GB", 141 * GB, 989 * TFLOPS, 67 * TFLOPS, 4800 * GB, LX_LINK_NVLINK4,
                           "NVIDIA H200 datasheet (SXM): 989 TFLOP/s bf16 dense, 67 TFLOP/s fp32, "
                           "4.8 TB/s HBM3e, NVLink 4 900 GB/s total"},
};

/* Latencies (alpha, per message or ring step) are NCCL's own per-hop
 * estimates for the ring algorithm with the Simple protocol, the one it picks
 * for the megabyte-sized payloads of training (src/graph/tuning.cc, hwLat:
 * NVLink 3.4, PCI 5.7, network 9.6 microseconds; later releases list
 * similar magnitudes). */
static const lx_link_spec link_specs[] = {
    [LX_LINK_NVLINK2] =
        {"nvlink2", 120 * GB, 3.4 * US,
         "NVLink 2 (V100 SXM2): 6 links x 25 GB/s = 150 GB/s per direction nominal, x 0.8 = the "
         "all-reduce bus bandwidth nccl-tests reach; alpha from NCCL tuning.cc ring/Simple"},
    [LX_LINK_NVLINK3] =
        {"nvlink3", 240 * GB, 3.4 * US,
         "NVLink 3 (A100 SXM4): 12 links x 25 GB/s = 300 GB/s per direction nominal, x 0.8 = the "
         "all-reduce bus bandwidth nccl-tests reach on DGX A100; alpha from NCCL tuning.cc"},
    [LX_LINK_NVLINK4] =
        {"nvlink4", 360 * GB, 3.4 * US,
         "NVLink 4 (H100/H200 SXM): 18 links x 25 GB/s = 450 GB/s per direction nominal, x 0.8 "
         "(ring, without NVLink SHARP); alpha from NCCL tuning.cc"},
    [LX_LINK_PCIE4] =
        {"pcie4", 25 * GB, 5.7 * US,
         "PCIe 4.0 x16: 32 GB/s per direction nominal, ~25 effective after protocol overhead; alpha "
         "from NCCL tuning.cc PCI ring/Simple"},
    [LX_LINK_PCIE5] =
        {"pcie5", 50 * GB, 5.7 * US,
         "PCIe 5.0 x16: 64 GB/s per direction nominal, ~50 effective after protocol overhead; alpha "
         "from NCCL tuning.cc PCI ring/Simple"},
    [LX_LINK_IB_HDR] =
        {"ib-hdr", 23 * GB, 9.6 * US,
         "InfiniBand HDR 200 Gb/s = 25 GB/s per NIC per direction, x 0.92 = what nccl-tests reach "
         "between nodes; one NIC per GPU (DGX A100); alpha from NCCL tuning.cc NET ring/Simple"},
    [LX_LINK_IB_NDR] =
        {"ib-ndr", 46 * GB, 9.6 * US,
         "InfiniBand NDR 400 Gb/s = 50 GB/s per NIC per direction, x 0.92 = what nccl-tests reach "
         "between nodes; one NIC per GPU (DGX H100); alpha from NCCL tuning.cc NET ring/Simple"},
};

#define SPEC_OF(table, value)                                                                                \
  ((size_t)(value) < sizeof(table) / sizeof(table)[0] && (table)[value].name ? &(table)[value] : NULL)

const lx_gpu_spec *lx_gpu_spec_of(lx_gpu gpu) { return SPEC_OF(gpu_specs, gpu); }

const lx_link_spec *lx_link_spec_of(lx_link link) { return SPEC_OF(link_specs, link); }
