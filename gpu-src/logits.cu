// Reductions over rows of logits, so greedy decoding need not copy a whole vocabulary back:
// argmax (the lowest index among equal maxima) and an in-place softmax.
//
// argmax(const float* x, int n, int* out)
//   grid: (rows, 1, 1)   block: (1024, 1, 1)   x: rows x n floats; out[row] = index of the max
// softmax(float* x, int n)
//   grid: (rows, 1, 1)   block: (1024, 1, 1)   each n-float row replaced by its softmax
#include "common.cuh"

extern "C" __global__ void argmax(const float* x, int n, int* out) {
    __shared__ float best_v[32];
    __shared__ int best_i[32];
    const float* row = x + (u64)blockIdx.x * n;
    float v = NEG_INF;
    int idx = 0x7fffffff;
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        if (row[i] > v) {
            v = row[i];
            idx = i;
        }
    }
    for (int off = 16; off > 0; off >>= 1) {
        const float ov = __shfl_xor_sync(0xffffffffu, v, off);
        const int oi = __shfl_xor_sync(0xffffffffu, idx, off);
        if (ov > v || (ov == v && oi < idx)) {
            v = ov;
            idx = oi;
        }
    }
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) {
        best_v[warp] = v;
        best_i[warp] = idx;
    }
    __syncthreads();
    if (warp == 0) {
        const int n_warps = blockDim.x >> 5;
        v = lane < n_warps ? best_v[lane] : NEG_INF;
        idx = lane < n_warps ? best_i[lane] : 0x7fffffff;
        for (int off = 16; off > 0; off >>= 1) {
            const float ov = __shfl_xor_sync(0xffffffffu, v, off);
            const int oi = __shfl_xor_sync(0xffffffffu, idx, off);
            if (ov > v || (ov == v && oi < idx)) {
                v = ov;
                idx = oi;
            }
        }
        if (lane == 0) out[blockIdx.x] = idx == 0x7fffffff ? 0 : idx;
    }
}

extern "C" __global__ void softmax(float* x, int n) {
    __shared__ float red[32];
    float* row = x + (u64)blockIdx.x * n;
    float m = NEG_INF;
    for (int i = threadIdx.x; i < n; i += blockDim.x) m = fmaxf(m, row[i]);
    m = block_max(m, red);
    float s = 0.0f;
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        const float e = expf(row[i] - m);
        row[i] = e;
        s += e;
    }
    s = block_sum(s, red);
    const float inv = 1.0f / s;
    for (int i = threadIdx.x; i < n; i += blockDim.x) row[i] *= inv;
}
