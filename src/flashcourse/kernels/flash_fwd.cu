// A tiled FlashAttention forward in CUDA C++: fp16 inputs, fp32 arithmetic, online softmax.
//
// One thread block per (query tile of BLOCK_M rows, batch * head). Each thread owns one query
// row: it keeps that row's running max m, running sum l and unnormalised output acc[D] in
// registers. The block walks over the keys in tiles of BLOCK_N rows: all threads copy one K
// tile and one V tile from HBM into shared memory together (coalesced: neighbouring threads
// read neighbouring halves), synchronise, and then every thread reads the whole tile from
// shared memory, so each K/V element fetched from HBM serves BLOCK_M query rows.
//
// Deliberately simple (no tensor cores, no cp.async, no warp-level reductions): it is the
// CUDA twin of the Triton kernel's algorithm, not a competitor to cuDNN.
//
// Inputs are contiguous (B, H, N, D) fp16; out is (B, H, N, D) fp16. No torch headers here:
// the course compiles this file with plain `nvcc -c`, and binds it to torch separately.

#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math_constants.h>

namespace flashcourse {

constexpr int BLOCK_M = 64;  // query rows per block = threads per block
constexpr int BLOCK_N = 32;  // key rows per shared-memory tile

template <int D>
__global__ void flash_fwd_kernel(const __half* __restrict__ q, const __half* __restrict__ k,
                                 const __half* __restrict__ v, __half* __restrict__ out,
                                 int n, float scale_log2, bool causal) {
  // Q is padded by 2 halves per row: thread t reads row t, and a row stride of D + 2 halves
  // (an odd number of 4-byte words) puts neighbouring threads in different memory banks.
  __shared__ __half q_tile[BLOCK_M][D + 2];
  __shared__ __half k_tile[BLOCK_N][D];  // every thread reads the same element: a broadcast
  __shared__ __half v_tile[BLOCK_N][D];
  __shared__ float s_tile[BLOCK_M][BLOCK_N + 1];  // each thread's scores; +1 avoids conflicts

  const int tid = threadIdx.x;
  const int row0 = blockIdx.x * BLOCK_M;
  const int row = row0 + tid;  // this thread's query row
  const long long head = static_cast<long long>(blockIdx.y) * n * D;  // offset of (b, h)
  q += head;
  k += head;
  v += head;
  out += head;

  // Stage the Q tile: BLOCK_M * D halves, BLOCK_M threads, consecutive threads on
  // consecutive addresses.
  for (int i = tid; i < BLOCK_M * D; i += BLOCK_M) {
    const int r = i / D, c = i % D;
    q_tile[r][c] = (row0 + r < n) ? q[static_cast<long long>(row0 + r) * D + c] : __float2half(0.f);
  }

  float acc[D];
#pragma unroll
  for (int c = 0; c < D; ++c) acc[c] = 0.f;
  float m = -CUDART_INF_F;  // running max, in log2 units
  float l = 0.f;            // running sum of exp2(s - m)

  // Causal: keys after the last row of this tile are never needed.
  const int key_end = causal ? min(n, row0 + BLOCK_M) : n;
  for (int start = 0; start < key_end; start += BLOCK_N) {
    __syncthreads();  // everyone is done with the previous tile (and the Q tile is ready)
    for (int i = tid; i < BLOCK_N * D; i += BLOCK_M) {
      const int r = i / D, c = i % D;
      const bool inside = start + r < n;
      const long long at = static_cast<long long>(start + r) * D + c;
      k_tile[r][c] = inside ? k[at] : __float2half(0.f);
      v_tile[r][c] = inside ? v[at] : __float2half(0.f);
    }
    __syncthreads();

    // Scores of this thread's row against the tile, in log2 units (scale includes log2 e),
    // kept in this thread's row of s_tile (shared memory: registers cannot be indexed by j).
    float tile_max = -CUDART_INF_F;
    for (int j = 0; j < BLOCK_N; ++j) {
      const int key = start + j;
      float dot = 0.f;
#pragma unroll 16
      for (int c = 0; c < D; ++c)
        dot += __half2float(q_tile[tid][c]) * __half2float(k_tile[j][c]);
      const bool visible = key < n && (!causal || key <= row);
      const float s = visible ? dot * scale_log2 : -CUDART_INF_F;
      s_tile[tid][j] = s;
      tile_max = fmaxf(tile_max, s);
    }
    const float m_new = fmaxf(m, tile_max);
    if (m_new == -CUDART_INF_F) continue;  // nothing visible yet (rows past n)
    const float alpha = exp2f(m - m_new);  // rescales what was summed against the old max
    l *= alpha;
#pragma unroll
    for (int c = 0; c < D; ++c) acc[c] *= alpha;
    for (int j = 0; j < BLOCK_N; ++j) {
      const float p = exp2f(s_tile[tid][j] - m_new);
      l += p;
#pragma unroll
      for (int c = 0; c < D; ++c) acc[c] += p * __half2float(v_tile[j][c]);
    }
    m = m_new;
  }

  if (row < n) {
    const float inv = 1.f / l;
    for (int c = 0; c < D; ++c)
      out[static_cast<long long>(row) * D + c] = __float2half(acc[c] * inv);
  }
}

}  // namespace flashcourse

// Launch on `stream`; returns cudaSuccess or the launch error. d must be 16, 32, 64 or 128.
extern "C" cudaError_t flashcourse_flash_fwd(const __half* q, const __half* k, const __half* v,
                                             __half* out, int batch_heads, int n, int d,
                                             float sm_scale, bool causal,
                                             cudaStream_t stream) {
  using namespace flashcourse;
  const dim3 grid((n + BLOCK_M - 1) / BLOCK_M, batch_heads);
  const float scale_log2 = sm_scale * 1.4426950408889634f;  // exp(x) == exp2(x * log2 e)
  switch (d) {
    case 16: flash_fwd_kernel<16><<<grid, BLOCK_M, 0, stream>>>(q, k, v, out, n, scale_log2, causal); break;
    case 32: flash_fwd_kernel<32><<<grid, BLOCK_M, 0, stream>>>(q, k, v, out, n, scale_log2, causal); break;
    case 64: flash_fwd_kernel<64><<<grid, BLOCK_M, 0, stream>>>(q, k, v, out, n, scale_log2, causal); break;
    case 128: flash_fwd_kernel<128><<<grid, BLOCK_M, 0, stream>>>(q, k, v, out, n, scale_log2, causal); break;
    default: return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}
