// Causal attention of queries over a layer's f16 KV cache, one (head, token) per block, with an
// online softmax over chunks of 128 cached positions, so the context length is not bounded by
// shared memory. Grouped-query attention (query head h reads kv head h / (n_head / n_head_kv)),
// an optional sliding window (positions pos - window + 1 ..= pos) and an optional soft-cap of
// the scores (cap * tanh(dot * (scale / cap)), as src/ops/softcap.rs orders it).
//
// With see_until >= 0 every query sees the positions up to see_until instead of up to its own
// (an image's rows read bidirectionally, Gemma 3; the vision encoder), the window still counted
// back from its own position.
//
// attention(const float* q, const u16* k_cache, const u16* v_cache, float* out, const int* pos,
//           int n_head, int n_head_kv, int head_dim, float scale, float softcap, int window,
//           int see_until)
//   grid: (n_head, n_tok, 1)   block: (128, 1, 1)   head_dim <= 256
//   q, out: n_tok x n_head x head_dim floats; k_cache, v_cache: rows of n_head_kv * head_dim
//   halves, every row up to max(pos, see_until) filled; softcap 0: none; window 0: none;
//   see_until -1: causal
#include "common.cuh"

#define CHUNK 128

extern "C" __global__ void attention(const float* q, const u16* k_cache, const u16* v_cache,
                                     float* out, const int* pos, int n_head, int n_head_kv,
                                     int head_dim, float scale, float softcap, int window,
                                     int see_until) {
    __shared__ float qs[256];
    __shared__ float probs[CHUNK];
    __shared__ float red[32];
    const int h = blockIdx.x, t = blockIdx.y, tid = threadIdx.x;
    const int kv_head = h / (n_head / n_head_kv);
    const int kv_dim = n_head_kv * head_dim;
    const float* qh = q + ((u64)t * n_head + h) * head_dim;
    for (int d = tid; d < head_dim; d += blockDim.x) qs[d] = qh[d];
    __syncthreads();

    const int own = pos[t];
    const int last = see_until >= 0 ? see_until : own;
    const int first = window > 0 ? max(0, own + 1 - window) : 0;
    const float mul = softcap > 0.0f ? scale / softcap : scale;
    float run_max = NEG_INF, run_sum = 0.0f;
    float acc0 = 0.0f, acc1 = 0.0f;  // output dims tid and tid + 128
    for (int base = first; base <= last; base += CHUNK) {
        const int p = base + tid;
        float s = NEG_INF;
        if (p <= last) {
            const u16* k = k_cache + (u64)p * kv_dim + kv_head * head_dim;
            float dot = 0.0f;
            for (int d = 0; d < head_dim; d++) dot = fmaf(qs[d], f16_to_f32(k[d]), dot);
            s = softcap > 0.0f ? softcap * tanhf(dot * mul) : dot * mul;
        }
        const float new_max = fmaxf(run_max, block_max(s, red));
        const float e = p <= last ? expf(s - new_max) : 0.0f;
        probs[tid] = e;
        const float factor = expf(run_max - new_max);  // 0 on the first chunk
        run_sum = run_sum * factor + block_sum(e, red);
        run_max = new_max;
        acc0 *= factor;
        acc1 *= factor;
        __syncthreads();
        const int n = min(CHUNK, last - base + 1);
        for (int j = 0; j < n; j++) {
            const u16* v = v_cache + (u64)(base + j) * kv_dim + kv_head * head_dim;
            const float pj = probs[j];
            if (tid < head_dim) acc0 = fmaf(pj, f16_to_f32(v[tid]), acc0);
            if (tid + 128 < head_dim) acc1 = fmaf(pj, f16_to_f32(v[tid + 128]), acc1);
        }
        __syncthreads();
    }
    float* o = out + ((u64)t * n_head + h) * head_dim;
    const float inv = 1.0f / run_sum;
    if (tid < head_dim) o[tid] = acc0 * inv;
    if (tid + 128 < head_dim) o[tid + 128] = acc1 * inv;
}
