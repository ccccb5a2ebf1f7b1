// Token embedding: the rows of the embedding matrix for a batch's token ids, dequantized from
// their GGUF blocks and multiplied by the model's embedding scale (1 for none).
//
// get_rows_<type>(const u8* w, const int* ids, float* out, int cols, float scale)
//   grid: (n_tok, 1, 1)   block: (128, 1, 1)
//   w: vocab x cols weights in <type> blocks; ids: n_tok ids, each < vocab (checked on the host)
//   out: n_tok x cols floats
#include "quant.cuh"

template <int T>
__device__ __forceinline__ void get_rows(const u8* w, const int* ids, float* out, int cols,
                                         float scale) {
    const u8* row = w + (u64)ids[blockIdx.x] * Q<T>::row_bytes(cols);
    float* dst = out + (u64)blockIdx.x * cols;
    for (int u = threadIdx.x; u < cols / 32; u += blockDim.x) {
        float v[32];
        Q<T>::deq32(row, u, v);
#pragma unroll
        for (int j = 0; j < 32; j++) dst[u * 32 + j] = v[j] * scale;
    }
}

#define GET_ROWS_KERNEL(name, type)                                                          \
    extern "C" __global__ void get_rows_##name(const u8* w, const int* ids, float* out,      \
                                               int cols, float scale) {                      \
        get_rows<type>(w, ids, out, cols, scale);                                            \
    }
FOR_EACH_WEIGHT_TYPE(GET_ROWS_KERNEL)
