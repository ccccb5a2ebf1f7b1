// Element-wise steps of the forward pass: residual adds, bias adds, scaling (the query scale,
// an embedding scale), soft-capping (final logits), and gathering the rows that asked for output.
//
// add(float* a, const float* b, int n)                       a[i] += b[i]
// add_rows(float* x, const float* bias, int n, int cols)     x[i] += bias[i % cols]
// scale(float* x, float s, int n)                            x[i] *= s
// softcap(float* x, float inv_cap, float cap, int n)         x[i] = cap * tanh(x[i] * inv_cap)
//   grid: (ceil(n / 256), 1, 1)   block: (256, 1, 1)   n: element count
// gather_rows(const float* x, const int* rows, float* out, int cols)
//   grid: (n_out, 1, 1)   block: (256, 1, 1)   out row i = x row rows[i]
#include "common.cuh"

extern "C" __global__ void add(float* a, const float* b, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) a[i] += b[i];
}

extern "C" __global__ void add_rows(float* x, const float* bias, int n, int cols) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] += bias[i % cols];
}

extern "C" __global__ void scale(float* x, float s, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= s;
}

extern "C" __global__ void softcap(float* x, float inv_cap, float cap, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = cap * tanhf(x[i] * inv_cap);
}

extern "C" __global__ void gather_rows(const float* x, const int* rows, float* out, int cols) {
    const float* src = x + (u64)rows[blockIdx.x] * cols;
    float* dst = out + (u64)blockIdx.x * cols;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) dst[c] = src[c];
}
