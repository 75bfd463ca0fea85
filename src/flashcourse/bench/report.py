"""The harness's output: plots and tables of its rows, and one forward launch profiled with
Nsight Compute."""

from __future__ import annotations

import sys
from pathlib import Path

from . import environment
from .cases import COLUMNS, LESSON6, TUTORIAL, Case


def mask_name(causal) -> str:
    """'causal' or 'full' for a row's causal field: True or False, or their text in a CSV."""
    return "causal" if str(causal) == "True" else "full"


def _measured_on(rows: list[dict]) -> dict:
    """GPU and versions of the rows (read back from a CSV), else of this process."""
    env = environment()
    return {key: rows[0].get(key, value) if rows else value for key, value in env.items()}


def plot_sweep(path: Path, rows: list[dict], title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt


    fp16 = [r for r in rows if r["dtype"] == "fp16"]
    panels = sorted({(r["d"], r["causal"]) for r in fp16})
    if not panels:
        return
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.6), squeeze=False)
    for ax, (d, causal) in zip(axes[0], panels, strict=True):
        for provider in COLUMNS:
            pts = [(r["N"], r["tflops"]) for r in fp16 if r["d"] == d and r["causal"] == causal
                   and r["provider"] == provider and r["tflops"] != ""]
            if pts:
                xs, ys = zip(*sorted(pts), strict=True)
                ax.plot(xs, ys, marker="o", label=provider,
                        linewidth=2.5 if provider == "course" else 1.2)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("sequence length N")
        ax.set_title(f"d={d}, {mask_name(causal)}")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("TFLOP/s")
    axes[0][-1].legend(fontsize=7)
    env = _measured_on(rows)
    fig.suptitle(f"{title} (fp16) - {env['gpu']}, torch {env['torch']}, Triton {env['triton']}",
                 fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_ladder(path: Path, rows: list[dict]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt


    cases = sorted({(r["d"], r["causal"]) for r in rows})
    if not cases:
        return
    fig, ax = plt.subplots(figsize=(9, 3.8))
    width = 0.8 / len(cases)
    for i, (d, causal) in enumerate(cases):
        pts = [(r["step"], r["tflops"]) for r in rows if r["d"] == d
               and r["causal"] == causal and r["tflops"] != ""]
        ax.bar([s + i * width for s, _ in pts], [t for _, t in pts], width,
               label=f"d={d} {mask_name(causal)}")
    names = {r["step"]: r["name"] for r in rows if r["tflops"] != ""}  # timed rows only
    ax.set_xticks([s + 0.4 - width / 2 for s in sorted(names)])
    ax.set_xticklabels([f"{s}\n{names[s]}" for s in sorted(names)], fontsize=7)
    ax.set_ylabel("TFLOP/s (fp16, N=4096)")
    ax.legend(fontsize=7)
    env = _measured_on(rows)
    ax.set_title(f"Optimisation ladder - {env['gpu']}, Triton {env['triton']}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def wide_rows(rows: list[dict]) -> list[dict]:
    """One row per case: TFLOP/s of every provider side by side, the course kernel's ratios
    to cuDNN, to the flash backend and to Triton's tutorial, the spread of repeated timings
    (percent of the median), its check status and what torch.compile did."""
    by_case: dict = {}
    for r in rows:
        key = (r["mode"], r["dtype"], r["d"], r["N"], r["causal"], r["B"], r["H"])
        by_case.setdefault(key, {})[r["provider"]] = r
    out = []
    for (mode, dtype, d, n, causal, b, h), prov in by_case.items():
        row = {"mode": mode, "dtype": dtype, "d": d, "N": n, "causal": causal, "B": b, "H": h}
        for name in COLUMNS:
            row[name] = prov[name]["tflops"] if name in prov else ""
        course, cudnn, flash = row.get("course"), row.get("sdpa-cudnn"), row.get("sdpa-flash")
        tutorial = row.get(TUTORIAL)
        row["course/cudnn"] = round(course / cudnn, 2) if course and cudnn else ""
        row["course/flash"] = round(course / flash, 2) if course and flash else ""
        row["course/tutorial"] = round(course / tutorial, 2) if course and tutorial else ""
        lesson6 = row.get(LESSON6)
        row["lesson6/course"] = round(lesson6 / course, 2) if course and lesson6 else ""
        for name in ("course", "sdpa-cudnn", LESSON6):
            row[f"{name} spread %"] = prov.get(name, {}).get("spread_pct", "")
        row["check"] = prov.get("course", {}).get("status", "")
        row["compile"] = prov.get("compile", {}).get("tflops", "")
        row["compile_note"] = prov.get("compile", {}).get("note", "")
        out.append(row)
    return out


def summary(rows: list[dict]) -> str:
    """Course kernel vs cuDNN and vs the flash backend, one line per case."""
    by_case: dict = {}
    for r in rows:
        key = (r["mode"], r["dtype"], r["d"], r["N"], r["causal"])
        by_case.setdefault(key, {})[r["provider"]] = r
    lines = [f"{'mode':7s} {'dtype':5s} {'d':>4s} {'N':>6s} {'causal':6s} {'course':>7s} "
             f"{'cudnn':>7s} {'flash':>7s} {'/cudnn':>7s} {'/flash':>7s} check"]
    for (mode, dtype, d, n, causal), prov in sorted(by_case.items()):
        def tf(name, prov=prov):
            row = prov.get(name)
            return row["tflops"] if row and row["tflops"] != "" else None

        course, cudnn, flash = tf("course"), tf("sdpa-cudnn"), tf("sdpa-flash")

        def cell(x):
            return f"{x:7.1f}" if x is not None else f"{'-':>7s}"

        def ratio(a, b):
            return f"{a / b:7.2f}" if a and b else f"{'-':>7s}"

        status = prov.get("course", {}).get("status", "")
        lines.append(f"{mode:7s} {dtype:5s} {d:4d} {n:6d} {str(causal):6s} {cell(course)} "
                     f"{cell(cudnn)} {cell(flash)} {ratio(course, cudnn)} "
                     f"{ratio(course, flash)} {status}")
    return "\n".join(lines)


NCU_METRICS = ("gpu__time_duration.sum", "sm__throughput.avg.pct_of_peak_sustained_elapsed",
               "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active",
               "dram__throughput.avg.pct_of_peak_sustained_elapsed",
               "sm__warps_active.avg.pct_of_peak_sustained_active",
               "launch__registers_per_thread", "launch__occupancy_limit_registers")


# Where the warps' cycles go: issue slots used, and cycles per issued instruction spent waiting
# on each reason (Nsight Compute's warp-state metrics).
NCU_STALL_METRICS = (
    "smsp__issue_active.avg.pct_of_peak_sustained_active",
    *(f"smsp__average_warps_issue_stalled_{reason}_per_issue_active.ratio" for reason in (
        "long_scoreboard", "short_scoreboard", "wait", "barrier", "mio_throttle",
        "math_pipe_throttle", "not_selected", "dispatch_stall")))
# The kernels each profile looks at, as ncu's --kernel-name regex.
NCU_KERNELS = {"fwd": "regex:attn_fwd", "bwd": "regex:attn_bwd_d(kdv|q)_kernel"}


def ncu_profile(mode: str = "fwd", d: int = 64, n: int = 4096, causal: bool = False,
                stalls: bool = False, timeout: int = 300) -> str:
    """Profile the course kernel's forward ("fwd": one launch) or its backward ("bwd": the
    dK/dV and dQ kernels, one launch each) with Nsight Compute; return the metric lines (or why
    it could not run). stalls adds NCU_STALL_METRICS. Clocks are left alone."""
    import shutil
    import subprocess

    if shutil.which("ncu") is None:
        return "ncu not found: Nsight Compute is part of the CUDA toolkit."
    case = Case("fwd", "fp16", d, n, causal)
    backward = mode == "bwd"
    script = ("import torch; import flashcourse as fc; fc.setup(verbose=False); "
              "from flashcourse.kernels import host; "
              f"q, k, v = (torch.randn({case.batch}, {case.heads}, {n}, {d}, device='cuda', "
              f"dtype=torch.float16, requires_grad={backward}) for _ in range(3)); "
              f"o = host.flash_attention(q, k, v, {causal}); "
              + ("o.backward(torch.randn_like(o)); " if backward else "")
              + "torch.cuda.synchronize()")
    metrics = NCU_METRICS + (NCU_STALL_METRICS if stalls else ())
    result = subprocess.run(
        ["ncu", "--clock-control", "none", "--kernel-name", NCU_KERNELS[mode],
         "--launch-count", "2" if backward else "1", "--metrics", ",".join(metrics),
         sys.executable, "-c", script], capture_output=True, text=True, timeout=timeout)
    lines = [line.rstrip() for line in result.stdout.splitlines()
             if "attn_" in line or "__" in line]
    keep = (len(metrics) + 1) * (2 if backward else 1)
    return "\n".join(lines[-keep:]) or (result.stdout + result.stderr)[-2000:]


def ncu_forward(d: int = 64, n: int = 4096, causal: bool = False, timeout: int = 300) -> str:
    """ncu_profile of one forward launch (lesson 8's Nsight Compute cell)."""
    return ncu_profile("fwd", d, n, causal, timeout=timeout)
