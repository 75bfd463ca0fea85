"""Lesson 8 on a GPU, in one command (375 s on an H200 with step 7 in the ladder):

    python gpu/perf.py --out assets/results [--quick] [--no-autotune] [--skip-cuda]
                       [--skip-checks] [--modes fwd,fwdbwd] [--no-ladder] [--checks-only]
    python gpu/perf.py --exercises   (only lesson 8's tuning and deployment exercises, graded
                                      compiled, with the tuning candidates' measured ratios)

(--modes, --no-ladder, --skip-checks and --skip-cuda split it into shorter calls.)

(a) checks every ladder step of the course kernel and its forward + backward on the GPU
    (fp16 and bf16, d = 64 and 128, B > 1, H > 1, ragged N, causal and not, transposed views,
    large logits with a custom sm_scale);
(b) runs the benchmark harness (ladder, then the forward and forward+backward sweeps), writing
    08-ladder.csv, 08-attention-fwd.csv, 08-attention-fwdbwd.csv (+ -raw.csv) and PNGs;
(c) builds the CUDA C++ kernel with load_inline and checks it against fp32 attention;
(d) prints the harness's summary: course kernel vs cuDNN and vs the flash backend.
Exit status 1 when any check fails.
"""

from __future__ import annotations

import argparse
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("assets/results"))
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--no-autotune", action="store_true")
    parser.add_argument("--skip-cuda", action="store_true")
    parser.add_argument("--skip-checks", action="store_true",
                        help="skip (a); the harness still checks every kernel it times")
    parser.add_argument("--modes", default="fwd,fwdbwd", help="sweeps to run: fwd, fwdbwd")
    parser.add_argument("--no-ladder", action="store_true")
    parser.add_argument("--checks-only", action="store_true", help="only (a), then exit")
    parser.add_argument("--exercises", action="store_true",
                        help="only grade lesson 8's tuning and deployment exercises here")
    args = parser.parse_args()

    import torch

    import flashcourse as fc

    fc.setup()
    if fc.runtime.current().interpreter:
        print("gpu/perf.py needs a CUDA GPU; nothing to do here.")
        return 0
    from flashcourse import bench
    from flashcourse.bench import harness
    from flashcourse.kernels import cuda_fwd, host, ladder, verify

    print(bench.environment())
    if args.exercises:
        return exercises()
    failures = []
    start = time.time()

    # (a) correctness of every step and of the backward
    for dtype in () if args.skip_checks else (torch.float16, torch.bfloat16):
        for step in ladder.ladder_steps():
            ok, why = ladder.step_supported(step)
            if not ok:
                print(f"step {step.number} ({step.name}): unsupported here: {why}")
                continue
            try:
                lines = verify.check_step(step, dtype=dtype)
                print(f"step {step.number} ({step.name}) {dtype}: {len(lines)} cases ok")
            except Exception as err:  # noqa: BLE001
                failures.append(f"step {step.number} {dtype}: {err}")
                print(f"step {step.number} ({step.name}) {dtype}: FAILED {err}")
        try:
            for line in verify.check_backward(dtype=dtype, custom_scale=True):
                print(line)
        except Exception as err:  # noqa: BLE001
            failures.append(f"backward {dtype}: {err}")
            print(f"backward {dtype}: FAILED {err}")
    print(f"(a) correctness checks done in {time.time() - start:.0f} s")
    if args.checks_only:
        return _exit_status(failures)

    # (c) first, so a slow harness cannot starve it: the CUDA C++ kernel
    if not args.skip_cuda:
        t = time.time()
        try:
            cuda_fwd.build()
            for line in cuda_fwd.check():
                print(line)
        except Exception as err:  # noqa: BLE001
            traceback.print_exc()
            failures.append(f"CUDA kernel: {err}")
        print(f"(c) CUDA kernel built and checked in {time.time() - t:.0f} s")

    # (b) + (d): the harness prints the ladder, the summary table, and writes the files
    t = time.time()
    argv = ["--out", str(args.out), "--modes", args.modes] + \
        (["--quick"] if args.quick else []) + \
        (["--no-autotune"] if args.no_autotune else []) + \
        (["--no-ladder"] if args.no_ladder else [])
    status = harness.main(argv)
    if status:
        failures.append("benchmark: some course-kernel rows are WRONG (see the CSVs)")
    print(f"(b) harness done in {time.time() - t:.0f} s; total {time.time() - start:.0f} s")
    for number, why in host.BROKEN_STEPS.items():
        print(f"note: ladder step {number} failed to compile and flash_attention fell back: {why}")
    return _exit_status(failures)


def _exit_status(failures: list[str]) -> int:
    """Print each failure; 1 if there was any, else 0."""
    for failure in failures:
        print("FAILED:", failure)
    return 1 if failures else 0


def exercises() -> int:
    """Lesson 8's tuning and deployment exercises, graded compiled on this GPU."""
    import math

    import torch

    from flashcourse import check
    from flashcourse.authoring import cells
    from flashcourse.checks.performance import tools
    from flashcourse.kernels import tiles

    lesson = Path(__file__).resolve().parents[1] / "lessons" / "08-performance.qmd"
    failures = 0
    for config in (tiles.BASELINE, (64, 64, 4, 2), (128, 64, 4, 2), (128, 64, 8, 3),
                   (128, 128, 8, 2)):
        ours, base = tools.time_configs(config, tiles.BASELINE)
        print(f"tuning {config}: {ours:.3f} ms, baseline {base:.3f} ms, {base / ours:.2f}x")
    answer = {}
    exec(cells.solution_source(lesson, "answer-tuning"), answer)  # noqa: S102
    prelude = (cells.PRELUDE + "import math\nimport torch.nn.functional as F\n"
               "from flashcourse.kernels import host\nGPU = True\n")
    deploy = cells.load_cells(lesson, ["machine-backends", "exercise-deploy"], prelude=prelude)
    for exercise, value in (("performance/tuning", answer["tuning_config"]),
                            ("performance/deployment", deploy.deployed_attention)):
        try:
            check(exercise, value)
        except Exception as err:  # noqa: BLE001
            failures += 1
            print(f"FAILED {exercise}: {err}")
    for dtype, d in ((torch.float16, 64), (torch.bfloat16, 128), (torch.float32, 64),
                     (torch.float16, 80)):
        q, k, v = (torch.randn(2, 4, 1000, d, device="cuda", dtype=dtype) for _ in range(3))
        out = deploy.deployed_attention(q, k, v, True)
        ref = torch.softmax((q.double() @ k.double().transpose(-1, -2) / math.sqrt(d))
                            .masked_fill(torch.ones(1000, 1000, dtype=torch.bool,
                                                    device="cuda").triu(1), float("-inf")),
                            -1) @ v.double()
        error = float((out.double() - ref).abs().max())
        bad = out.dtype != dtype or not error < 3e-2
        failures += bad
        print(f"{'FAIL' if bad else 'ok  '} deployed_attention {dtype} d={d} on the GPU: "
              f"{out.dtype}, max error {error:.2e}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
