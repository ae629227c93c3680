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

/* Host figures: a DGX node of 8 GPUs, each with its own x16 host link. Pinned
 * copies reach ~85% of a link's nominal rate; when all 8 GPUs offload and
 * prefetch at once (training's steady state) they share the node's DRAM
 * bandwidth, of which copies reach ~80% (STREAM-like), in 16 streams. */
#define HOST_SHARE(dram) ((dram)*0.8 / 16)

static const lx_gpu_spec gpu_specs[] = {
    [LX_GPU_V100_32GB] =
        {"V100-SXM2-32GB", 32 * GB, 125 * TFLOPS, 15.7 * TFLOPS, 900 * GB, LX_LINK_NVLINK2,
         "NVIDIA Tesla V100 datasheet (SXM2 32GB): 125 TFLOP/s fp16 tensor, 15.7 TFLOP/s fp32, "
         "900 GB/s HBM2, NVLink 2 300 GB/s total",
         HOST_SHARE(153.6 * GB), 512 * GB / 8,
         "DGX-1 V100 datasheet: 512 GB DDR4, 2 Xeon E5-2698 v4 (4 channels DDR4-2400 each: 153.6 GB/s "
         "for the node); PCIe 3.0 x16 host links (15.75 GB/s per direction, 13.4 effective) are "
         "not the limit"},
    [LX_GPU_A100_40GB] = {"A100-SXM4-40GB", 40 * GB, 312 * TFLOPS, 19.5 * TFLOPS, 1555 * GB, LX_LINK_NVLINK3,
                          "NVIDIA A100 datasheet (SXM4 40GB): 312 TFLOP/s bf16 dense, 19.5 TFLOP/s fp32, "
                          "1555 GB/s HBM2, NVLink 3 600 GB/s total",
                          HOST_SHARE(409.6 * GB), 1024 * GB / 8,
                          "DGX A100 320GB datasheet: 1 TB DDR4, 2 AMD EPYC 7742 (8 channels DDR4-3200 "
                          "each: 409.6 GB/s for the node); PCIe 4.0 x16 host links (32 GB/s per "
                          "direction, 27 effective) are not the limit"},
    [LX_GPU_A100_80GB] = {"A100-SXM4-80GB", 80 * GB, 312 * TFLOPS, 19.5 * TFLOPS, 2039 * GB, LX_LINK_NVLINK3,
                          "NVIDIA A100 datasheet (SXM4 80GB): 312 TFLOP/s bf16 dense, 19.5 TFLOP/s fp32, "
                          "2039 GB/s HBM2e, NVLink 3 600 GB/s total",
                          HOST_SHARE(409.6 * GB), 2048 * GB / 8,
                          "DGX A100 640GB datasheet: 2 TB DDR4, 2 AMD EPYC 7742 (8 channels DDR4-3200 "
                          "each: 409.6 GB/s for the node); PCIe 4.0 x16 host links (32 GB/s per "
                          "direction, 27 effective) are not the limit"},
    [LX_GPU_H100_80GB] = {"H100-SXM5-80GB", 80 * GB, 989 * TFLOPS, 67 * TFLOPS, 3350 * GB, LX_LINK_NVLINK4,
                          "NVIDIA H100 datasheet (SXM5): 989 TFLOP/s bf16 dense, 67 TFLOP/s fp32, "
                          "3.35 TB/s HBM3, NVLink 4 900 GB/s total",
                          HOST_SHARE(614.4 * GB), 2048 * GB / 8,
                          "DGX H100 datasheet: 2 TB DDR5, 2 Xeon Platinum 8480C (8 channels DDR5-4800 "
                          "each: 614.4 GB/s for the node); H100's PCIe 5.0 x16 host link (64 GB/s per "
                          "direction, 54 effective) is not the limit"},
    [LX_GPU_H200_141GB] = {"H200-SXM-141GB", 141 * GB, 989 * TFLOPS, 67 * TFLOPS, 4800 * GB, LX_LINK_NVLINK4,
                           "NVIDIA H200 datasheet (SXM): 989 TFLOP/s bf16 dense, 67 TFLOP/s fp32, "
                           "4.8 TB/s HBM3e, NVLink 4 900 GB/s total",
                           HOST_SHARE(614.4 * GB), 2048 * GB / 8,
                           "DGX H200 datasheet: 2 TB DDR5, 2 Xeon Platinum 8480C (8 channels DDR5-4800 "
                           "each: 614.4 GB/s for the node); PCIe 5.0 x16 host links are not the limit"},
    [LX_GPU_GH200_96GB] = {"GH200-96GB", 96 * GB, 989 * TFLOPS, 67 * TFLOPS, 4000 * GB, LX_LINK_NVLINK4,
                           "NVIDIA GH200 Grace Hopper Superchip datasheet: H100 with 96 GB HBM3 at 4 TB/s, "
                           "1979 TFLOP/s bf16 with sparsity (989 dense), 67 TFLOP/s fp32, NVLink 4 900 GB/s",
                           512 * GB * 0.8 / 2, 480 * GB,
                           "GH200 datasheet: NVLink-C2C 900 GB/s both directions (450 per direction, 382 "
                           "effective) to 480 GB LPDDR5X at 512 GB/s, of which copies reach ~80%, split "
                           "between the two directions: 205 GB/s each"},
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
