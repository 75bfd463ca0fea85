"""The one table of launch configurations: tile sizes, warps and stages of every kernel.

A config is (BLOCK_M, BLOCK_N, num_warps, num_stages) unless a comment says otherwise; BLOCK_M
is the query-row tile, BLOCK_N the key tile, and BLOCK_M % BLOCK_N == 0 in every forward entry
(the causal diagonal block is walked in BLOCK_N steps). Each table says where it was measured.
No Triton here: the table is read before a runtime is chosen.
"""

from __future__ import annotations

# ---------------------------------------------------------------- both kernels

# The interpreter (CPU): small tiles, because its cost grows with tile area.
INTERPRETER = (16, 16, 4, 1)

# ---------------------------------------------------------------- the reference kernel (lesson 8)

# Forward, keyed on head dim <= 64. Measured best on an H200 with Triton 3.6 (gpu/explore_fwd.py,
# fp16, N = 4096 and 16384): the best config did not depend on N or on causal masking. d = 128
# wants one warpgroup per 128 query rows so that two CTAs share an SM and hide each other's
# softmax; d = 64 wants two warpgroups and four K/V tiles in flight.
BASELINE = (64, 32, 4, 2)  # ladder steps 0-2: a first guess, before any tuning
TUNED = {True: (128, 64, 8, 4), False: (128, 64, 4, 2)}  # steps 3-6
# Step 7 where the halves paid (same runs; d <= 64: one warpgroup, two 64-row halves); at
# d = 128 the second half's scores and acc do not fit in the registers beside the first's and
# step 5 is faster.
HALVES = {True: (128, 64, 4, 3), False: None}
# What forward(..., autotune=True) searches when compiled: (BLOCK_M, BLOCK_N, num_warps) at
# num_stages = 2 for step 3, then num_stages for step 5 with step 3's tiles from TUNED.
AUTOTUNE_TILES = [(64, 64, 4), (128, 64, 4), (128, 64, 8), (128, 32, 4)]
AUTOTUNE_STAGES = [2, 3, 4]
AUTOTUNE_STEPS = (3, 5)  # the ladder steps autotune applies to
# Steps 3-7 at head dim 256 (160 and the others above 128 run padded to 256). Measured on an H200
# with Triton 3.6 (gpu/check_head_dims.py --sweep, fp16, N = 4096, B = 8, H = 16, causal and
# not): 3.99 / 2.20 ms (full / causal) against 4.96-7.93 / 2.72-4.41 for (64, 64, 4, 2),
# (64, 32, 4, 2), (64, 64, 8, 2) and (128, 32, 8, 2). Stages not swept: a third K/V stage
# beside the 128 x 256 query tile would need 256 KB of shared memory (computed; an SM has 228).
# d = 128's TUNED entry would hold a (128, 256) fp32 accumulator in 4 warps' registers.
TUNED_WIDE = (128, 64, 8, 2)

# Backward, keyed on head dim <= 64: (dK/dV config, dQ config). Measured as pairs on an H200
# with Triton 3.9 (gpu/explore_bwd.py --kernels pair, fp16, N = 1k, 4k and 16k, round-robin beside
# cuDNN): at d = 128 these ran 1.07-1.24x the earlier ((64, 128, 8, 2), (128, 64, 8, 2)). At
# d = 64 the dK/dV config is the best single change with tensor descriptors (Triton 3.6, N = 4k,
# --kernels dkdv+tma: 0.86x and 0.89x cuDNN's backward without and with the mask, against 0.78x
# and 0.84x for the earlier (32, 128, 4, 4); assets/results/08-explore-bwd.csv). The dK/dV kernel
# keeps a key block resident and walks query blocks, the dQ kernel the other way round.
LADDER_BACKWARD = {
    True: ((64, 64, 4, 3), (128, 64, 4, 3)),
    False: ((64, 64, 4, 2), (128, 64, 8, 3)),
}
# Head dim 256 (and the head dims padded to it): the fastest of four dK/dV configs with dQ at
# (64, 32, 4, 2) and of four dQ configs with dK/dV at (32, 64, 8, 2), in the same run as
# TUNED_WIDE (timed as forward + backward: 29.0 / 16.1 ms full / causal for dK/dV against 33.5-
# 58.7 / 17.7-30.5; 32.3 / 16.7 for dQ against 33.7-39.4 / 17.7-20.7); the pair as a whole
# was timed only in that run's padding table (assets/results/08-head-dims.csv).
LADDER_BACKWARD_WIDE = ((64, 64, 8, 2), (128, 32, 8, 2))
# Smaller tiles, tried when a GPU has too little shared memory for LADDER_BACKWARD.
LADDER_BACKWARD_FALLBACK = ((32, 64, 4, 2), (64, 32, 4, 2))
DELTA_BLOCK_M = 64  # rows per program of the delta pre-pass (INTERPRETER's in the interpreter)

# ---------------------------------------------------------------- lesson 6 (the student's kernels)

# Forward, keyed by (head dim, causal), for the kernel that reads K and V through tensor
# descriptors. d = 64: the best of nine candidates for the pointer-load kernel before it, on an
# H200 with Triton 3.9, fp16, N = 4096 and 16384 (gpu/tune_lesson6.py, 06-lesson6-tiles.csv),
# and within 1% of the best of three for the descriptor kernel (gpu/explore_lesson6.py,
# 06-explore-lesson6.csv); d = 128: the best of those three, 4 warps and 2 stages as the
# reference's own. d = 16 and 32: known good with Triton 3.6.
FORWARD_CONFIGS = {
    (16, False): (64, 64, 4, 3), (16, True): (64, 64, 4, 3),
    (32, False): (64, 64, 4, 3), (32, True): (64, 64, 4, 3),
    (64, False): (128, 64, 8, 3), (64, True): (128, 64, 8, 4),
    (128, False): (128, 64, 4, 2), (128, True): (128, 64, 4, 2),
}
FORWARD_DEFAULT = (64, 64, 4, 3)  # a (head dim, causal) not in the table
# Backward, keyed by (kernel, head dim); tuned on an H200 (gpu/tune_flash_backward.py),
# N = 4096, fp16.
BACKWARD_CONFIGS = {
    ("dkdv", 16): (64, 64, 4, 3), ("dkdv", 32): (64, 64, 4, 3), ("dkdv", 64): (64, 64, 4, 3),
    ("dkdv", 128): (64, 64, 4, 2),
    ("dq", 16): (64, 64, 4, 3), ("dq", 32): (64, 64, 4, 3), ("dq", 64): (64, 64, 4, 3),
    ("dq", 128): (64, 32, 4, 3),
}
BACKWARD_DEFAULT = (64, 64, 4, 2)  # a (kernel, head dim) not in the table

# ---------------------------------------------------------------- lesson 9 (masks and decoding)

# Block-sparse forward on a GPU, keyed on head dim: lesson 6's forward configs with key blocks of
# 64, so that a window's edges cost less (assets/results/09-masks.csv, H200, Triton 3.6).
# d = 256: the fastest of (64, 64, 4, 2), (128, 64, 8, 2) and (64, 32, 4, 2) on the causal mask
# (2.72 ms against 3.09-3.25, fp16, N = 4096, B = 8, H = 16; gpu/check_head_dims.py --sweep,
# H200, Triton 3.6).
SPARSE_CONFIGS = {64: (128, 64, 4, 3), 128: (128, 64, 8, 3), 256: (64, 64, 4, 2)}
# The reference block-sparse forward (sparse_forward.py), keyed on head dim: the fastest all
# round of five configs on causal, causal window, documents and a random block mask
# (assets/results/09-sparse-tiles.csv: fp16, N = 16384, B = 1, H = 16, H200, Triton 3.6). d = 128:
# first on three masks, 64 x 64 x 4 x 3 is 13% faster on the documents and 18% slower on causal;
# d = 64: within 8% of the best on every mask, where 8 warps lose 45% on the documents.
# d = 256: not measured, the dense reference's TUNED_WIDE.
SPARSE_REFERENCE = {64: (128, 64, 4, 3), 128: (128, 64, 4, 2), 256: (128, 64, 8, 2)}
# Query blocks of 64 rows: the reference's tiles for a sliding window with no documents at
# head dims up to 64 (sparse_reference_config; 1.18 to 1.26x FlexAttention there against 1.11
# to 1.15x on the tiles above, 09-masks-flex.csv, Triton 3.6 and 3.9). In that sweep they
# were the fastest of five on the window and the documents at d = 64 (0.231 and 0.430 ms
# against 0.243 and 0.467, before steps 5 and 6) and on the documents at d = 128 (0.627
# against 0.722 ms, no spills where the tiles above spill), where row ranges won instead.
SPARSE_SMALL_BLOCKS = (64, 64, 4, 3)
# Decoding: keys per step of the split-KV and paged kernels (assets/results/09-decode.csv).
DECODE_BLOCK_N = {"interpreter": 16, "gpu": 64}
# The reference decoding kernel (kernels/decode.py), keyed on head dim rounded up to a power of
# two: (BLOCK_N, num_warps, num_stages). Measured on an H200 with Triton 3.6, fp16, pages of 64,
# CUDA-graph replays, each config at its best split count (gpu/tune_decode.py,
# assets/results/09-decode-tune.csv): at d = 128, (64, 4, 3) was within 1% of the best of six
# configs on 8 of 9 shapes (3% on batch 1, 4k keys); at d = 64, (128, 4, 3) within 1.3% of the
# best of five on all 4. d <= 32 and d = 256: not measured.
DECODE_CONFIGS = {16: (128, 4, 3), 32: (128, 4, 3), 64: (128, 4, 3), 128: (64, 4, 3),
                  256: (32, 4, 2)}
# Programs per SM a step's grid may reach (decode_splits): with those configs the fastest split
# count gave 512 programs on 132 SMs (about 4 per SM) on 10 of the 13 shapes swept, batch 1 to
# 64, and splits of one block were the fastest on 4k-key caches at batch 1 with GQA.
DECODE_PROGRAMS_PER_SM = 4
# (num_warps, num_stages) of the decoding kernel that reads a page per block through TMA
# (decode.py, kv_loads="tma"): with the page numbers a page ahead, 3 stages keep 2 pages of K
# and V in flight (the compiler's buffers, gpu/decode_buffers.py). Not timed yet.
DECODE_TMA_CONFIG = (4, 3)
DECODE_MIN_SPLIT_BLOCKS = 1  # the shortest split, in blocks of BLOCK_N keys
# The read-only kernel (decode.read_only): (programs per SM, int32 words per block, num_warps),
# the fastest of 12 on 8 MiB, 512 MiB and 4 GiB (same sweep; 4.59 TB/s on 4 GiB).
READ_ONLY_CONFIG = (16, 2048, 8)
