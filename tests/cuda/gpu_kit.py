"""make test-gpu's programs on a GPU machine that cannot build them.

On a user's GPU node the CUDA tests generate, build and run everything in a
temporary folder. A GPU lent for minutes, without libclang, GLPK or OpenBLAS,
splits that in two (bench/gpu/kit.sh, bench/gpu/device.sh):

  LX_KIT_PHASE=prepare  (here) generates and builds every program, CPU and
                        CUDA, runs the CPU ones and writes their metrics;
                        nothing runs on a GPU;
  LX_KIT_PHASE=device   (there) builds nothing and runs no CPU program: it
                        reads the CPU metrics written before, runs the CUDA
                        programs and makes every comparison;

both in LX_KIT_DIR, which then travels to the GPU machine. Unset, a test
runs whole, as make test-gpu does.
"""
import contextlib
import os
import subprocess
import tempfile

PHASE = os.environ.get("LX_KIT_PHASE", "")
if PHASE not in ("", "prepare", "device"):
    raise SystemExit("LX_KIT_PHASE must be prepare or device, not %r" % PHASE)

BUILDS = PHASE != "device"  # lynxgen and make run
RUNS_CPU = PHASE != "device"  # the CPU programs train (else their metrics are read)
RUNS_GPU = PHASE != "prepare"


@contextlib.contextmanager
def work_dir(name):
    """The test's folder: LX_KIT_DIR/name when preparing or running a kit, else a temporary one."""
    kit = os.environ.get("LX_KIT_DIR")
    if PHASE and not kit:
        raise SystemExit("LX_KIT_PHASE needs LX_KIT_DIR")
    if not PHASE:
        with tempfile.TemporaryDirectory(prefix="lx_%s_" % name) as work:
            yield work
        return
    work = os.path.join(os.path.abspath(kit), name)
    if PHASE == "prepare":
        os.makedirs(work, exist_ok=False)  # a kit is prepared once, into an empty folder
    elif not os.path.isdir(work):
        raise SystemExit("%s: not prepared (bench/gpu/kit.sh makes it)" % work)
    yield work


def gpu_count():
    """GPUs nvidia-smi lists (0 without a driver)."""
    try:
        listing = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return 0
    if listing.returncode != 0:
        return 0
    return sum(1 for line in listing.stdout.splitlines() if line.startswith("GPU "))
