// Quantized matrix-matrix products for prompt processing: Y = X W^T for many tokens. Each block
// computes a 64-row x 64-token tile, stepping through the columns 32 at a time: 64 threads
// dequantize one 32-element unit of a weight row each into shared memory while every thread
// loads part of the 64 x 32 activation tile; then each thread accumulates a 4 x 4 sub-tile.
//
// matmul_<type>(const u8* w, const float* x, float* y, int rows, int cols, int n_tok)
//   grid:  (ceil(rows / 64), ceil(n_tok / 64), 1)   block: (256, 1, 1)
//   w:     rows x cols weights, row-major GGUF blocks of <type> (cols whole blocks; any cols
//          for f32 and f16, the last unit partial)
//   x:     n_tok x cols floats          y: n_tok x rows floats, y[t * rows + r]
//   shared memory: static, 2 x 64 x 33 floats
#include "quant.cuh"

#define TILE 64

template <int T>
__device__ __forceinline__ void matmul(const u8* w, const float* x, float* y, int rows, int cols,
                                       int n_tok) {
    __shared__ float ws[TILE][33];
    __shared__ float xs[TILE][33];
    const int tid = threadIdx.x;
    const int r0 = blockIdx.x * TILE, t0 = blockIdx.y * TILE;
    const int tx = tid & 15, ty = tid >> 4;
    const u64 row_bytes = Q<T>::row_bytes(cols);
    float acc[4][4];
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j++) acc[i][j] = 0.0f;

    const int units = (cols + 31) / 32;
    for (int u = 0; u < units; u++) {
        if (tid < TILE) {
            const int r = r0 + tid;
            float v[32];
            if (r < rows) {
                deq_unit<T>(w + (u64)r * row_bytes, u, cols, v);
            } else {
#pragma unroll
                for (int j = 0; j < 32; j++) v[j] = 0.0f;
            }
#pragma unroll
            for (int j = 0; j < 32; j++) ws[tid][j] = v[j];
        }
        // 64 x 32 activations, 8 per thread; consecutive threads read consecutive columns.
#pragma unroll
        for (int k = 0; k < 8; k++) {
            const int idx = tid + k * 256;
            const int t = idx >> 5, c = idx & 31;
            xs[t][c] = (t0 + t < n_tok && u * 32 + c < cols) ? x[(u64)(t0 + t) * cols + u * 32 + c]
                                                             : 0.0f;
        }
        __syncthreads();
#pragma unroll 8
        for (int c = 0; c < 32; c++) {
            float a[4], b[4];
#pragma unroll
            for (int i = 0; i < 4; i++) a[i] = ws[ty + 16 * i][c];
#pragma unroll
            for (int j = 0; j < 4; j++) b[j] = xs[tx + 16 * j][c];
#pragma unroll
            for (int i = 0; i < 4; i++)
#pragma unroll
                for (int j = 0; j < 4; j++) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const int r = r0 + ty + 16 * i;
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const int t = t0 + tx + 16 * j;
            if (r < rows && t < n_tok) y[(u64)t * rows + r] = acc[i][j];
        }
    }
}

#define MATMUL_KERNEL(name, type)                                                         \
    extern "C" __global__ void matmul_##name(const u8* w, const float* x, float* y, int rows, \
                                             int cols, int n_tok) {                        \
        matmul<type>(w, x, y, rows, cols, n_tok);                                          \
    }
FOR_EACH_WEIGHT_TYPE(MATMUL_KERNEL)
