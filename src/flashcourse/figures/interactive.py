"""The book's interactive diagrams (Observable JS, run in the reader's browser, no kernel).

Each diagram is an OJS file in `figures/ojs/` and, where its numbers come from one of the
package's models, a table of those numbers that `python -m flashcourse build` exports to
`book/data/<name>.json` (the page loads it with `FileAttachment`; `check-sync` catches a stale
one). A lesson places a diagram with one line of its own, `<!-- interactive: NAME -->`: the
build expands it into the OJS cell on the book page and leaves it out of the notebooks.

- `tile-traffic` (lesson 4): BLOCK_M and BLOCK_N against the HBM bytes a tiled matmul reads and
  its arithmetic intensity, beside the ridge point (`models.matmul`, `hardware`);
- `online-softmax` (lesson 5): the running max, sum and output over the key blocks of a row the
  reader types, computed in the browser by `online_softmax.js`, a port of
  `softmax_blocks.running_states` (tests run both on the same rows);
- `tile-map` (lesson 6): the causal and sliding-window tile maps with BLOCK_M and BLOCK_N
  sliders (lesson 9's `classify_rule`);
- `ring-schedule` (lesson 10): the ring schedule under the contiguous and the zigzag split, with
  each rank's work at each step (`distributed.model`).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np

from .. import distributed as ring
from .. import hardware
from ..kernels import modern_attention as blocks
from ..models import matmul
from ..models.traffic import format_bytes
from .algorithm import TILE_COLORS
from .ring import KIND_COLORS

OJS_DIR = Path(__file__).parent / "ojs"
INCLUDE = re.compile(r"^(?P<indent>[ ]*)/\* include: (?P<file>[a-z_]+\.js) \*/$", re.M)

# tile-traffic: the shapes and tile sides the sliders offer
TRAFFIC_SHAPES = ((4096, 4096, 4096), (1000, 1000, 1000))
TRAFFIC_BLOCKS = (16, 32, 64, 128, 256)
TRAFFIC_ITEMSIZE = 2  # fp16
# tile-map: one ragged length, as lesson 6's figure, and the masks of lesson 9
TILE_MAP_N = 1000
TILE_MAP_BLOCKS = (16, 32, 64, 128)
TILE_MAP_MASKS = {"causal": None, "sliding window, 128 keys": 128,
                  "sliding window, 256 keys": 256}
# ring-schedule: ranks and the sequence length
RING_WORLD_SIZES = (2, 3, 4, 5, 6, 7, 8)
RING_N = 4096


def names() -> list[str]:
    """Every diagram a lesson may place."""
    return sorted(path.stem for path in OJS_DIR.glob("*.ojs"))


def ojs_cell(name: str) -> str:
    """The fenced OJS cell of diagram `name`, as a book page holds it (code hidden, the
    diagram shown). Raises KeyError for a name with no OJS file."""
    path = OJS_DIR / f"{name}.ojs"
    if not path.exists():
        raise KeyError(name)
    code = INCLUDE.sub(_included, path.read_text(encoding="utf-8").strip("\n"))
    return "\n".join(["```{ojs}", "//| echo: false", code, "```"])


def _included(match: re.Match) -> str:
    """The JS file a `/* include: FILE.js */` line names, indented as the line is."""
    text = (OJS_DIR / match.group("file")).read_text(encoding="utf-8").strip("\n")
    return "\n".join(match.group("indent") + line if line else line
                     for line in text.splitlines())


def online_softmax_js() -> str:
    """The browser's port of `running_states`, as the book page holds it."""
    return (OJS_DIR / "online_softmax.js").read_text(encoding="utf-8")


# ---------------------------------------------------------------- the tables


def tile_traffic_table() -> dict:
    """HBM bytes read and arithmetic intensity of a tiled matmul (no cache) for every pair of
    tile sides, per shape; C is written once."""
    peak, bandwidth = hardware.H200_MEASURED_GEMM_BF16_TFLOPS, hardware.H200_MEASURED_COPY_TBS
    shapes = []
    for M, N, K in TRAFFIC_SHAPES:
        flops = matmul.matmul_flops(M, N, K)
        written = M * N * TRAFFIC_ITEMSIZE
        tiles = {}
        for bm in TRAFFIC_BLOCKS:
            for bn in TRAFFIC_BLOCKS:
                read = matmul.tiled_read_bytes(M, N, K, bm, bn, TRAFFIC_ITEMSIZE)
                tiles[f"{bm}x{bn}"] = {"read": read, "read_text": format_bytes(read),
                                       "intensity": flops / (read + written)}
        naive = matmul.naive_read_bytes(M, N, K, TRAFFIC_ITEMSIZE)
        once = (M * K + K * N) * TRAFFIC_ITEMSIZE
        shapes.append({"M": M, "N": N, "K": K, "flops": flops, "written": written,
                       "naive_read": naive, "naive_read_text": format_bytes(naive),
                       "naive_intensity": flops / (naive + written),
                       "once_read": once, "once_read_text": format_bytes(once),
                       "once_intensity": flops / (once + written),
                       "tiles": tiles})
    return {"dtype": "fp16", "blocks": list(TRAFFIC_BLOCKS), "peak_tflops": peak,
            "bandwidth_tbs": bandwidth, "ridge": hardware.ridge_point(peak, bandwidth),
            "shapes": shapes}


def tile_map_table() -> dict:
    """The block map of every mask and pair of block sides at N = TILE_MAP_N: one string per
    query block, a digit per key block (0 skipped, 1 computed with the mask, 2 without)."""

    maps = {}
    for label, window in TILE_MAP_MASKS.items():
        left = blocks.UNLIMITED if window is None else window - 1
        for bm in TILE_MAP_BLOCKS:
            for bn in TILE_MAP_BLOCKS:
                kinds = blocks.classify_rule(TILE_MAP_N, bm, bn, left=left, right=0)
                maps[f"{label}|{bm}x{bn}"] = {
                    "rows": ["".join(str(int(k)) for k in row) for row in kinds],
                    "counts": blocks.tile_counts(kinds)}
    return {"n": TILE_MAP_N, "blocks": list(TILE_MAP_BLOCKS), "masks": list(TILE_MAP_MASKS),
            "kinds": {"0": "skipped, never loaded", "1": "computed with the mask",
                      "2": "computed, no mask"},
            "colors": {"0": TILE_COLORS["skipped"], "1": TILE_COLORS["masked"],
                       "2": TILE_COLORS["computed"]},
            "maps": maps}


def ring_table() -> dict:
    """For P ranks and each split: whose K/V each rank holds at each step, what it does with
    each pair of chunks, the score pairs it computes at each step, and its total."""

    table = {}
    for world_size in RING_WORLD_SIZES:
        for zigzag in (False, True):
            schedule = ring.ring_schedule(world_size)
            per_step = [ring.plan_work(RING_N, world_size, zigzag, plan=_only_step(step))
                        for step in range(world_size)]
            table[f"{world_size}|{'zigzag' if zigzag else 'contiguous'}"] = {
                "holds": schedule.tolist(),
                "kinds": [[[kind for _, _, kind in ring.step_plan(rank, step, world_size,
                                                                  zigzag)]
                           for step in range(world_size)] for rank in range(world_size)],
                "work": np.stack(per_step, axis=1).tolist(),  # [rank][step]
                "total": ring.plan_work(RING_N, world_size, zigzag).tolist()}
    return {"n": RING_N, "world_sizes": list(RING_WORLD_SIZES), "colors": KIND_COLORS,
            "rings": table}


def _only_step(step: int):
    """A plan that is `step_plan` at `step` and empty at every other step."""

    def plan(rank, at, world_size, zigzag):
        return ring.step_plan(rank, at, world_size, zigzag) if at == step else []
    return plan


TABLES = {"tile-traffic": tile_traffic_table, "tile-map": tile_map_table,
          "ring-schedule": ring_table}


def data_files(data_dir: Path) -> dict[Path, str]:
    """Every exported table, as the JSON text of its file in `data_dir` (book/data/, beside
    the pages that load it)."""
    return {data_dir / f"{name}.json":
            json.dumps(make(), indent=None, separators=(",", ":")) + "\n"
            for name, make in TABLES.items()}
