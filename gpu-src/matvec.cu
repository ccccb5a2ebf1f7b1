// Quantized matrix-vector products for generation: y = W x for up to MATVEC_MAX_TOKENS token
// rows at once (decoding, speculative verification, a few server slots), weights read in their
// GGUF block layout. Each weight unit of 32 elements is dequantized once and dotted with every
// token's activations.
//
// matvec_<type>(const u8* w, const float* x, float* y, int rows, int cols, int n_tok)
//   grid:  (ceil(rows / 4), 1, 1)    block: (128, 1, 1)   one warp per weight row
//   w:     rows x cols weights, row-major, GGUF blocks of <type> (cols whole blocks; any cols
//          for f32 and f16, the last unit partial)
//   x:     n_tok x cols floats (token-major)
//   y:     n_tok x rows floats: y[t * rows + r] = sum_c w[r][c] * x[t * cols + c]
//   n_tok: 1..=8
#include "quant.cuh"

#define MATVEC_MAX_TOKENS 8

template <int T>
__device__ __forceinline__ void matvec(const u8* w, const float* x, float* y, int rows, int cols,
                                       int n_tok) {
    const int r = blockIdx.x * 4 + (threadIdx.x >> 5);
    const int lane = threadIdx.x & 31;
    if (r >= rows) return;
    const u8* row = w + (u64)r * Q<T>::row_bytes(cols);
    float acc[MATVEC_MAX_TOKENS];
#pragma unroll
    for (int t = 0; t < MATVEC_MAX_TOKENS; t++) acc[t] = 0.0f;
    const int units = (cols + 31) / 32;
    for (int u = lane; u < units; u += 32) {
        float v[32];
        deq_unit<T>(row, u, cols, v);
        const int n = min(32, cols - u * 32);
#pragma unroll
        for (int t = 0; t < MATVEC_MAX_TOKENS; t++) {
            if (t < n_tok) {
                const float* xt = x + (u64)t * cols + u * 32;
                float s = 0.0f;
#pragma unroll
                for (int j = 0; j < 32; j++)
                    if (j < n) s = fmaf(v[j], xt[j], s);
                acc[t] += s;
            }
        }
    }
#pragma unroll
    for (int t = 0; t < MATVEC_MAX_TOKENS; t++) {
        if (t < n_tok) {
            const float s = warp_sum(acc[t]);
            if (lane == 0) y[(u64)t * rows + r] = s;
        }
    }
}

#define MATVEC_KERNEL(name, type)                                                         \
    extern "C" __global__ void matvec_##name(const u8* w, const float* x, float* y, int rows, \
                                             int cols, int n_tok) {                        \
        matvec<type>(w, x, y, rows, cols, n_tok);                                          \
    }
FOR_EACH_WEIGHT_TYPE(MATVEC_KERNEL)
