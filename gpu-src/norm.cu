// RMS normalisation of rows, as src/ops/norm.rs computes it: the sum of squares (each square in
// f32) accumulated in f64, mean + eps, reciprocal square root, then (x * scale) * weight.
//
// rms_norm(const float* x, const float* w, float* out, int cols, float eps)
//   grid: (rows, 1, 1)   block: (256, 1, 1)
//   x, out: rows x cols floats (out may equal x: in place)     w: cols floats
// Layer normalisation of rows, as the vision encoder's src/vision/layers.rs computes it: the
// mean from an f64 sum, the centred squares (each in f32) summed in f64, variance + eps,
// reciprocal square root, then (x - mean) * scale * weight + bias.
//
// layer_norm(const float* x, const float* w, const float* b, float* out, int cols, float eps)
//   grid: (rows, 1, 1)   block: (256, 1, 1)   w, b: cols floats; out may equal x
#include "common.cuh"

__device__ __forceinline__ double warp_sum_f64(double v) {
    for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
    return v;
}

// The sum of `v` over the block's threads (every thread gets it).
__device__ __forceinline__ double block_sum_f64(double v, double* partial) {
    v = warp_sum_f64(v);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    __syncthreads();
    if (lane == 0) partial[warp] = v;
    __syncthreads();
    v = lane < (int)(blockDim.x >> 5) ? partial[lane] : 0.0;
    return warp_sum_f64(v);
}

extern "C" __global__ void layer_norm(const float* x, const float* w, const float* b, float* out,
                                      int cols, float eps) {
    __shared__ double partial[32];
    const float* row = x + (u64)blockIdx.x * cols;
    float* dst = out + (u64)blockIdx.x * cols;
    double sum = 0.0;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) sum += (double)row[c];
    const float mean = (float)(block_sum_f64(sum, partial) / (double)cols);
    double sum2 = 0.0;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) {
        const float v = row[c] - mean;
        sum2 += (double)(v * v);
    }
    const float var = (float)(block_sum_f64(sum2, partial) / (double)cols);
    const float scale = 1.0f / sqrtf(var + eps);
    for (int c = threadIdx.x; c < cols; c += blockDim.x) {
        dst[c] = (row[c] - mean) * scale * w[c] + b[c];
    }
}

extern "C" __global__ void rms_norm(const float* x, const float* w, float* out, int cols,
                                    float eps) {
    __shared__ double partial[32];
    const float* row = x + (u64)blockIdx.x * cols;
    float* dst = out + (u64)blockIdx.x * cols;
    double sum = 0.0;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) {
        const float v = row[c];
        sum += (double)(v * v);
    }
    sum = warp_sum_f64(sum);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) partial[warp] = sum;
    __syncthreads();
    sum = lane < (int)(blockDim.x >> 5) ? partial[lane] : 0.0;
    sum = warp_sum_f64(sum);
    const float mean = (float)(sum / (double)cols);
    const float scale = 1.0f / sqrtf(mean + eps);
    for (int c = threadIdx.x; c < cols; c += blockDim.x) dst[c] = (row[c] * scale) * w[c];
}
