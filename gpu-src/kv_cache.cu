// Stores new keys and values into a layer's f16 KV cache (the layout of src/kv_cache.rs: one
// row of n_head_kv * head_dim halves per position), rounding to nearest even.
//
// kv_store(const float* k, const float* v, u16* k_cache, u16* v_cache, const int* pos,
//          int kv_dim)
//   grid: (n_tok, 1, 1)   block: (256, 1, 1)
//   k, v: n_tok x kv_dim floats; row t goes to cache row pos[t]
#include "common.cuh"

extern "C" __global__ void kv_store(const float* k, const float* v, u16* k_cache, u16* v_cache,
                                    const int* pos, int kv_dim) {
    const int t = blockIdx.x;
    const u64 src = (u64)t * kv_dim, dst = (u64)pos[t] * kv_dim;
    for (int i = threadIdx.x; i < kv_dim; i += blockDim.x) {
        k_cache[dst + i] = f32_to_f16(k[src + i]);
        v_cache[dst + i] = f32_to_f16(v[src + i]);
    }
}
