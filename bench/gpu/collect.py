"""bench/gpu/collect.py [--earlier GPU_JSON] RESULTS_TGZ... — bench/results/gpu.json from device runs.

Reads what bench/gpu/device.sh left in results.tgz (one log per step, the
benchmark programs' metrics.jsonl, the 1.3B program's profile and memory
samples) and writes the keys issue 13 asks for. Given several archives
(a lease's calls, each with LX_STEPS), a step's files come from the last
archive that ran it; with --earlier, what no archive measured (attention,
the 1.3B run, PyTorch's GPT-2) comes from that earlier report, named as
such. The 1.3B predictions are
lynxgen's own, from the kit's model file: the cost model alone, and with
the measured profile fed back (lynxgen --profile).

MFU counts the model FLOPs of Narayanan et al. 2021 (shared/reference/
formulas.md) over the dense bf16 peak of the device (989 TFLOP/s for the
H100 and H200 SXM); HFU adds what the plan recomputes (its plan.txt).
"""
import datetime
import json
import os
import re
import statistics
import subprocess
import sys
import tarfile
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "cuda"))
from cuda_training_test import LAYOUTS, LOSS_BOUND  # tests/cuda/cuda_training_test.py
KIT = os.path.join(ROOT, "build", "gpu-kit")
PEAK_BF16 = 989e12
SKIP_STEPS = 2  # the first steps pay for start-up (cuBLASLt heuristics, allocations)


def read(path):
    return open(path).read() if os.path.exists(path) else ""


def records(path):
    return [json.loads(line) for line in read(path).splitlines() if line.strip()]


def steady(values):
    return statistics.median(values[SKIP_STEPS:]) if len(values) > SKIP_STEPS else None


def last_number(text, key):
    found = re.findall(r"^%s\s+([0-9.eE+-]+)" % key, text, re.M)
    return float(found[-1]) if found else None


def attention(results):
    """Per (seq, head_dim), fwd+bwd TFLOP/s: the programs' attention ("lynxgen": cuDNN through
    lx_cuda_cudnn_attention.cu; before it, lynx's kernels), lynx's own kernels, PyTorch's FA2 and cuDNN."""
    rows = {}
    for log in ("attention_lynx.log", "attention_cudnn.log", "attention_torch.log"):
        for line in read(os.path.join(results, log)).splitlines():
            if line.startswith("{"):
                r = json.loads(line)
                rows.setdefault((r["seq"], r["head_dim"]), {})[r["impl"]] = r.get("fwd_bwd_tflops")
    return [{"seq": seq, "head_dim": d, "lynxgen_tflops": v.get("lynxgen"), "fa2_tflops": v.get("fa2"),
             "cudnn_tflops": v.get("cudnn"), "cudnn_deterministic_tflops": v.get("cudnn-deterministic"),
             "lynxgen_kernels_tflops": v.get("lynxgen-kernels")}
            for (seq, d), v in sorted(rows.items())]


def plan_ms(*extra):
    """lynxgen's predicted iteration time of the kit's 1.3B program, in ms."""
    r = subprocess.run([os.path.join(ROOT, "bin", "lynxgen"), os.path.join(KIT, "bench", "gpt13b-flash.model"),
                        "--tp", "1", "--dp", "1", "--pp", "1", "--global-batch", "32", "--plan", *extra],
                       capture_output=True, text=True)
    found = re.search(r"^iteration *([0-9.]+) ms", r.stdout, re.M)
    return float(found.group(1)) if found else None


def recompute_factor():
    """HFU / MFU of the kit's 1.3B plan: the FLOPs it runs (recomputation too) over the model's."""
    found = re.search(r"MFU ([0-9.]+)%, HFU ([0-9.]+)%", read(os.path.join(KIT, "bench", "gpt13b", "plan.txt")))
    return float(found.group(2)) / float(found.group(1)) if found else None


def gpt13b(results):
    steps = records(os.path.join(results, "gpt13b.jsonl"))
    step_ms = steady([r["ms"] for r in steps])
    # examples/gpt13b.model: L 24, h 2048, V 50257 (padded to a multiple of 128 in the program), s 2048, B 32
    L, h, V, s, B = 24, 2048, 50257, 2048, 32
    model_flops = 72 * B * s * L * h * h * (1 + s / (6 * h) + V / (12 * L * h))
    memory = [int(x) for x in read(os.path.join(results, "gpt13b_memory.csv")).split() if x.isdigit()]
    log = read(os.path.join(results, "gpt13b.log"))
    arena = re.search(r"arena ([0-9.]+) GiB predicted", log)
    reported = re.search(r"device memory after step 1: ([0-9.]+) GiB more in use", log)  # lx_cuda_main.h
    # device memory in use at the peak, less what was in use before the run (nvidia-smi, MiB; with the context)
    smi_peak = (max(memory) - memory[0]) * 2**20 if memory else None
    profile = os.path.join(results, "gpt13b.profile")
    mfu = model_flops / (step_ms / 1e3) / PEAK_BF16 if step_ms else None
    factor = recompute_factor()
    return {
        "step_ms": step_ms,
        "predicted_ms": plan_ms("--profile", profile) if os.path.exists(profile) else None,
        "cost_model_ms": plan_ms(),
        "mfu": mfu,
        "hfu": mfu * factor if mfu and factor else None,
        # the program's own count (its allocations are static: after step 1 is its peak), else nvidia-smi's
        "peak_bytes": round(float(reported.group(1)) * 2**30) if reported else smi_peak,
        "nvidia_smi_peak_bytes": smi_peak,
        "planned_bytes": round(float(arena.group(1)) * 2**30) if arena else None,
    }


def multi_rank(results):
    """The worst relative loss difference of each layout against the CPU program, from the TAP lines;
    a layout whose comparison never printed (the run failed or hung) has none."""
    rows = []
    pattern = re.compile(r"^(ok|not ok) - (.*?)(?:, its ranks on one GPU \(--comm host\))?: CUDA and CPU losses.*"
                         r"within (\d+)%.*worst relative difference ([0-9.e+-]+|inf)")
    for line in read(os.path.join(results, "cuda_training_test.log")).splitlines():
        m = pattern.match(line)
        if m:
            rows.append({"layout": m.group(2), "max_rel_loss_diff": float(m.group(4)),
                         "bound": int(m.group(3)) / 100, "ok": m.group(1) == "ok"})
    compared = {row["layout"] for row in rows}
    rows += [{"layout": name, "max_rel_loss_diff": None, "bound": LOSS_BOUND, "ok": False}
             for name, _, _ in LAYOUTS if name not in compared]
    return rows


def tap_counts(results, log):
    lines = read(os.path.join(results, log)).splitlines()
    return {"ok": sum(l.startswith("ok - ") for l in lines), "not_ok": sum(l.startswith("not ok - ") for l in lines)}


def ratio(a, b):
    return round(a / b, 4) if a and b else None


def targets(report):
    """Issue 13's targets, each as its measured figure, the bar and whether it is met (None: not measured)."""
    long_d128 = [r for r in report["attention"] if r["seq"] >= 2048 and r["head_dim"] == 128]
    fa2 = min((ratio(r["lynxgen_tflops"], r["fa2_tflops"]) or 0 for r in long_d128), default=None)
    cudnn = min((ratio(r["lynxgen_tflops"], r["cudnn_tflops"]) or 0 for r in long_d128), default=None)
    gpt2, big = report["gpt2_124m"], report["gpt13b_pp1"]
    rows = {
        "gpt13b_mfu": (big["mfu"], ">= 0.50", None if big["mfu"] is None else big["mfu"] >= 0.5),
        "gpt13b_step_over_prediction": (ratio(big["step_ms"], big["predicted_ms"]), "within 1 +- 0.10",
                                        None if not big["predicted_ms"] else
                                        abs(big["step_ms"] / big["predicted_ms"] - 1) <= 0.1),
        "attention_vs_fa2_min_seq2k_d128": (fa2, ">= 1.5", None if fa2 is None else fa2 >= 1.5),
        "attention_vs_cudnn_min_seq2k_d128": (cudnn, ">= 1.0", None if cudnn is None else cudnn >= 1.0),
        "gpt2_vs_llmc": (ratio(gpt2["lynxgen_tok_s"], gpt2["llmc_tok_s"]), ">= 1.0",
                         None if not gpt2["llmc_tok_s"] else gpt2["lynxgen_tok_s"] >= gpt2["llmc_tok_s"]),
        "peak_over_plan": (ratio(big["peak_bytes"], big["planned_bytes"]), "within 1 +- 0.02",
                           None if not big["planned_bytes"] else
                           abs(big["peak_bytes"] / big["planned_bytes"] - 1) <= 0.02),
        "multi_rank_within_bound": ("%d of %d" % (sum(r["ok"] for r in report["multi_rank"]),
                                                  len(report["multi_rank"])), "all layouts",
                                    all(r["ok"] for r in report["multi_rank"]) if report["multi_rank"] else None),
    }
    return {name: {"measured": m, "target": t, "met": met} for name, (m, t, met) in rows.items()}


def carry_earlier(report, earlier_path):
    """The sections that no archive measured, from an earlier gpu.json of the same device (a
    lease too short for every step), each named in report["carried_from_earlier"] with its date."""
    earlier = json.load(open(earlier_path))
    if earlier.get("device") != report["device"]:
        sys.exit("collect.py: --earlier %s is from %s, this run from %s" % (earlier_path, earlier.get("device"),
                                                                            report["device"]))
    carried = []
    if not report["attention"]:
        report["attention"] = earlier["attention"]
        carried.append("attention")
    if report["gpt13b_pp1"]["step_ms"] is None:
        report["gpt13b_pp1"] = earlier["gpt13b_pp1"]
        carried.append("gpt13b_pp1")
    for key in ("pytorch_tok_s", "llmc_own_kernels_tok_s"):
        if report["gpt2_124m"][key] is None and earlier["gpt2_124m"].get(key) is not None:
            report["gpt2_124m"][key] = earlier["gpt2_124m"][key]
            carried.append("gpt2_124m." + key)
    report["carried_from_earlier"] = {"date": earlier.get("date"), "sections": carried}


def main():
    args = sys.argv[1:]
    earlier = None
    if len(args) >= 2 and args[0] == "--earlier":
        earlier, args = args[1], args[2:]
    archives, out = args, os.path.join(ROOT, "bench", "results", "gpu.json")
    with tempfile.TemporaryDirectory() as work:
        results = os.path.join(work, "lx-results")
        steps = []
        for archive in archives:
            with tempfile.TemporaryDirectory() as one:
                with tarfile.open(archive) as tar:
                    tar.extractall(one, filter="data")
                for name in os.listdir(os.path.join(one, "lx-results")):
                    if name != "summary.txt":
                        os.makedirs(results, exist_ok=True)
                        os.replace(os.path.join(one, "lx-results", name), os.path.join(results, name))
                steps += read(os.path.join(one, "lx-results", "summary.txt")).splitlines()
        inventory = read(os.path.join(results, "inventory.log"))
        device = re.search(r"^name, .*\n([^,]*),", inventory, re.M)
        lynx = steady([r["tokens_per_s"] for r in records(os.path.join(results, "gpt2_lynxgen.jsonl"))])
        report = {
            "device": device.group(1) if device else None,
            "date": datetime.date.today().isoformat(),
            "attention": attention(results),
            "gpt2_124m": {"lynxgen_tok_s": lynx,
                          # llm.c at its fastest: with cuDNN's attention where that build ran
                          "llmc_tok_s": last_number(read(os.path.join(results, "gpt2_llmc_cudnn.log")), "llmc_tok_s")
                          or last_number(read(os.path.join(results, "gpt2_llmc.log")), "llmc_tok_s"),
                          "llmc_own_kernels_tok_s": last_number(read(os.path.join(results, "gpt2_llmc.log")),
                                                                "llmc_tok_s"),
                          "pytorch_tok_s": last_number(read(os.path.join(results, "gpt2_pytorch.log")),
                                                       "pytorch_tok_s")},
            "gpt13b_pp1": gpt13b(results),
            "multi_rank": multi_rank(results),
            "tests": {log[:-4]: tap_counts(results, log) for log in
                      ("kernel_twins.log", "kernel_twins_cudnn.log", "cuda_training_test.log",
                       "cuda_resume_test.log")},
            "steps": steps,
        }
        if earlier:
            carry_earlier(report, earlier)
        report["targets"] = targets(report)
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "w") as f:
        json.dump(report, f, indent=2)
        f.write("\n")
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
