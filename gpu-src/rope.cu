// Rotary position embedding in ggml's two layouts, as src/ops/rope.rs: `normal` rotates adjacent
// pairs (x[2i], x[2i+1]), `neox` the halves (x[i], x[i + n_dims/2]). Pair i's angle is
// pos * theta_scale^i built by repeated f32 multiplication (as the host builds it), divided by
// freq_factors[i] when given, times freq_scale; cos and sin are scaled by attn_factor.
//
// rope(float* x, const int* pos, int n_heads, int head_dim, int n_dims, int neox,
//      float theta_scale, float freq_scale, float attn_factor, const float* freq_factors)
//   grid: (n_tok, n_heads, 1)   block: (n_dims / 2, 1, 1)   (n_dims <= 2048)
//   x: n_tok x n_heads x head_dim floats, rotated in place; pos: n_tok positions
//   theta_scale: freq_base^(-2 / n_dims) computed on the host; freq_factors: n_dims / 2 floats
//   or null
// Multi-section rotation (ggml's rope_multi, M-RoPE, as src/ops/mrope.rs with shared sections):
// pair i takes its angle from position component c (time, height, width, extra) of its token,
// c being the section that i mod (s0 + s1 + s2 + s3) falls in; the angle is that component times
// theta_scale^i, built by repeated f32 multiplication, times freq_scale (no frequency factors).
//
// rope_multi(float* x, const int* pos4, int n_heads, int head_dim, int n_dims, int neox,
//            float theta_scale, float freq_scale, float attn_factor, int s0, int s1, int s2,
//            int s3)
//   grid: (n_tok, n_heads, 1)   block: (n_dims / 2, 1, 1)   pos4: n_tok x 4 positions
#include "common.cuh"

// Rotates pair i of one head by `angle`, cos and sin scaled by attn_factor.
__device__ __forceinline__ void rotate_pair(float* head, int i, int half, int neox, float angle,
                                            float attn_factor) {
    const float c = cosf(angle) * attn_factor, s = sinf(angle) * attn_factor;
    const int a = neox ? i : 2 * i;
    const int b = neox ? i + half : 2 * i + 1;
    const float x0 = head[a], x1 = head[b];
    head[a] = fmaf(x0, c, -(x1 * s));
    head[b] = fmaf(x0, s, x1 * c);
}

extern "C" __global__ void rope(float* x, const int* pos, int n_heads, int head_dim, int n_dims,
                                int neox, float theta_scale, float freq_scale, float attn_factor,
                                const float* freq_factors) {
    const int t = blockIdx.x, h = blockIdx.y, i = threadIdx.x;
    const int half = n_dims / 2;
    if (i >= half) return;
    float theta = (float)pos[t];
    for (int k = 0; k < i; k++) theta *= theta_scale;
    const float ff = freq_factors ? freq_factors[i] : 1.0f;
    float* head = x + ((u64)t * n_heads + h) * head_dim;
    rotate_pair(head, i, half, neox, freq_scale * (theta / ff), attn_factor);
}

extern "C" __global__ void rope_multi(float* x, const int* pos4, int n_heads, int head_dim,
                                      int n_dims, int neox, float theta_scale, float freq_scale,
                                      float attn_factor, int s0, int s1, int s2, int s3) {
    const int t = blockIdx.x, h = blockIdx.y, i = threadIdx.x;
    const int half = n_dims / 2;
    if (i >= half) return;
    const int sect_dims = max(1, s0 + s1 + s2 + s3);
    const int sector = i % sect_dims;
    const int c = sector < s0 ? 0 : sector < s0 + s1 ? 1 : sector < s0 + s1 + s2 ? 2 : 3;
    float theta = (float)pos4[t * 4 + c];
    for (int k = 0; k < i; k++) theta *= theta_scale;
    float* head = x + ((u64)t * n_heads + h) * head_dim;
    rotate_pair(head, i, half, neox, freq_scale * theta, attn_factor);
}
