// Gated feed-forward activations, as src/ops/activation.rs: SwiGLU, gate = silu(gate) * up, and
// GeGLU, gate = gelu(gate) * up with ggml's GELU: the tanh form evaluated at the input rounded to
// f16 and itself rounded to f16 (the CPU's table), 0 below -10 and the identity above 10.
//
// swiglu(float* gate, const float* up, int n)
// geglu(float* gate, const float* up, int n)
//   grid: (ceil(n / 256), 1, 1)   block: (256, 1, 1)   gate, up: n floats; gate is written
// The vision encoder's activations in place, as src/vision/layers.rs: GELU as in geglu without
// the product; quick GELU x * sigmoid(1.702 x) at the input rounded to f16, rounded to f16
// (ggml's table, everywhere); SiLU x * sigmoid(x) in f32.
//
// gelu(float* x, int n)   gelu_quick(float* x, int n)   silu(float* x, int n)
//   grid: (ceil(n / 256), 1, 1)   block: (256, 1, 1)
#include "common.cuh"

extern "C" __global__ void swiglu(float* gate, const float* up, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const float g = gate[i];
    gate[i] = g / (1.0f + expf(-g)) * up[i];
}

__device__ __forceinline__ float gelu_tanh(float x) {
    const float sqrt_2_over_pi = 0.7978846f, coef_a = 0.044715f;
    return 0.5f * x * (1.0f + tanhf(sqrt_2_over_pi * x * (1.0f + coef_a * x * x)));
}

// ggml's GELU of x: through its f16 table between -10 and 10.
__device__ __forceinline__ float gelu_ggml(float x) {
    if (x <= -10.0f) return 0.0f;
    if (x >= 10.0f) return x;
    return f16_to_f32(f32_to_f16(gelu_tanh(f16_to_f32(f32_to_f16(x)))));
}

extern "C" __global__ void geglu(float* gate, const float* up, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    gate[i] = gelu_ggml(gate[i]) * up[i];
}

extern "C" __global__ void gelu(float* x, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = gelu_ggml(x[i]);
}

extern "C" __global__ void gelu_quick(float* x, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const float h = f16_to_f32(f32_to_f16(x[i]));
    x[i] = f16_to_f32(f32_to_f16(h / (1.0f + expf(-1.702f * h))));
}

extern "C" __global__ void silu(float* x, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = x[i] / (1.0f + expf(-x[i]));
}
