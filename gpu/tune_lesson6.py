"""Tile configs of lesson 6's teaching forward, timed beside the reference forward (lesson 8).

    python gpu/tune_lesson6.py [--out DIR] [--repeats 3] [--bench] [--use FILE]

For fp16, d = 64 and 128, causal and not, N = 4096 and 16384 (B * N = 32k tokens, H * d =
2048), times the solution's flash_forward_kernel with every candidate (BLOCK_M, BLOCK_N,
num_warps, num_stages) and the reference forward's default, round-robin, `--repeats` times
(triton.testing.do_bench medians). Before it is timed, each candidate's output is compared with
the reference's, and it is checked against fp32 attention on ragged, batched, multi-head and
transposed inputs in fp16 and bf16 (kernels.verify.check_forward); one that differs, or fails
to compile, is marked and never chosen. Writes tune-lesson6.csv (one row per case and config:
median ms, spread, lesson6/course) and prints, per (d, causal), the config with the best summed
time: the candidate entries for tiles.FORWARD_CONFIGS, also written to lesson6-best.json.
--use FILE reads such a file instead of tuning. --bench then applies them in this process and
runs the benchmark with `--no-ladder --providers sdpa-cudnn,course,lesson6`, so that the whole
grid (fp16 and bf16, N = 1k-16k, forward and forward + backward) is timed side by side with the
chosen tiles.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

import torch  # noqa: E402

from flashcourse import bench, runtime  # noqa: E402
from flashcourse.bench import harness, providers  # noqa: E402
from flashcourse.kernels import attention, host, tiles, verify  # noqa: E402

CANDIDATES = {
    64: [(64, 64, 4, 3), (128, 64, 4, 3), (128, 64, 8, 3), (128, 64, 8, 4), (128, 64, 4, 2),
         (128, 32, 4, 3), (128, 128, 8, 3), (64, 32, 4, 3), (64, 64, 4, 4)],
    128: [(128, 128, 8, 3), (64, 64, 4, 3), (128, 64, 8, 3), (128, 64, 4, 2), (128, 64, 8, 2),
          (128, 32, 8, 3), (64, 64, 4, 2), (128, 128, 8, 2), (64, 32, 4, 3)],
}
TOKENS, WIDTH, TOL = 32768, 2048, 2e-2
LENGTHS = (4096, 16384)
# Before a config is timed: (B, H, N) of its checks against fp32 attention (ragged N, B and
# H > 1; the second case as a (B, N, H, d) view), in each of these dtypes.
CHECK_BHN = ((2, 3, 333), (3, 2, 257))
CHECK_DTYPES = (torch.float16, torch.bfloat16)


def time_case(d: int, causal: bool, n: int, forward_kernel, repeats: int) -> list[dict]:
    """One row per config of one case: median ms over repeats beside the reference's, or why
    it was not timed (it failed, differed from the reference, or failed its checks)."""
    q, k, v = attention.make_inputs(TOKENS // n, WIDTH // d, n, d, torch.float16,
                                    device="cuda", seed=n + d)
    expected, _ = host.forward(q, k, v, causal)
    calls, rows = {}, []
    for config in CANDIDATES[d]:
        tiles.FORWARD_CONFIGS[(d, causal)] = config
        row = {"d": d, "causal": causal, "N": n, "config": "x".join(map(str, config)), "ms": "",
               "spread_pct": "", "course_ms": "", "lesson6/course": "", "status": ""}
        try:
            out, _ = attention.flash_forward(forward_kernel, q, k, v, causal)
            error = (out.float() - expected.float()).abs().max().item()
            if error <= TOL:
                for dtype in CHECK_DTYPES:
                    verify.check_forward(
                        lambda q, k, v, c: attention.flash_forward(forward_kernel, q, k, v, c),
                        dtype, [(*bhn, d) for bhn in CHECK_BHN], (causal,), name="lesson 6")
        except AssertionError as err:  # a check case differs from fp32 attention
            rows.append({**row, "status": f"WRONG: {err}"[:200]})
            continue
        except Exception as err:  # out of shared memory, a config Triton refuses
            rows.append({**row, "status": f"failed: {type(err).__name__}"})
            continue
        if not error <= TOL:
            rows.append({**row, "status": f"WRONG: max error {error:.1e}"})
            continue
        calls[row["config"]] = (row, config)
    times = {name: [] for name in [*calls, "course"]}
    for _ in range(repeats):  # round-robin, so that drift touches every config alike
        for name, (_, config) in calls.items():
            tiles.FORWARD_CONFIGS[(d, causal)] = config
            times[name].append(bench.median_ms(
                lambda: attention.flash_forward(forward_kernel, q, k, v, causal), rep_ms=50))
        times["course"].append(bench.median_ms(lambda: host.forward(q, k, v, causal), rep_ms=50))
    course_ms = statistics.median(times["course"])
    for name, (row, _) in calls.items():
        ms = statistics.median(times[name])
        rows.append({**row, "ms": round(ms, 4), "spread_pct": harness.spread_pct(times[name]),
                     "course_ms": round(course_ms, 4),
                     "lesson6/course": round(course_ms / ms, 3), "status": "ok"})
    return rows


def tune(out: Path, repeats: int) -> dict:
    """Time every candidate; write tune-lesson6.csv and lesson6-best.json; return the best."""
    forward_kernel = providers.lesson6_kernels().flash_forward_kernel
    default = dict(tiles.FORWARD_CONFIGS)
    rows, best = [], {}
    for d in (64, 128):
        for causal in (False, True):
            case_rows = []
            for n in LENGTHS:
                case_rows += time_case(d, causal, n, forward_kernel, repeats)
            tiles.FORWARD_CONFIGS[(d, causal)] = default[(d, causal)]
            rows += case_rows
            totals: dict[str, float] = {}
            for row in case_rows:
                if row["status"] == "ok":
                    totals[row["config"]] = totals.get(row["config"], 0.0) + row["ms"]
                else:
                    totals[row["config"]] = float("inf")
            name = min(totals, key=totals.get)
            best[(d, causal)] = tuple(int(x) for x in name.split("x"))
            for row in case_rows:
                if row["config"] == name:
                    print(f"d={d} causal={causal!s:5s} N={row['N']:5d} best {name}: "
                          f"{row['ms']} ms, lesson6/course {row['lesson6/course']}")
    bench.write_csv(out / "tune-lesson6.csv", rows)
    (out / "lesson6-best.json").write_text(json.dumps(
        [[d, "causal" if causal else "full", list(config)]
         for (d, causal), config in best.items()]))
    return best


def read_best(path: Path) -> dict:
    """{(d, causal): config} from a lesson6-best.json that tune() wrote."""
    return {(d, causal == "causal"): tuple(config) for d, causal, config
            in json.loads(path.read_text())}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("results"))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--bench", action="store_true",
                        help="then time the whole grid side by side with the chosen tiles")
    parser.add_argument("--use", type=Path, help="lesson6-best.json of an earlier run: no tuning")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("tune_lesson6: no CUDA GPU here; this script times compiled kernels only.")
        return 0
    runtime.setup()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.use:
        best = read_best(args.use)
    else:
        best = tune(args.out, args.repeats)
    print("tiles.FORWARD_CONFIGS updates:", best)
    if args.bench:
        tiles.FORWARD_CONFIGS.update(best)
        return harness.main(["--no-ladder", "--repeats", str(args.repeats), "--providers",
                             "sdpa-cudnn,course,lesson6", "--out", str(args.out)])
    return 0


if __name__ == "__main__":
    sys.exit(main())
