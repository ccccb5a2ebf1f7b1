// Gated feed-forward activations, as src/ops/activation.rs: SwiGLU, gate = silu(gate) * up, and
// GeGLU, gate = gelu(gate) * up with ggml's GELU: the tanh form evaluated at the input rounded to
// f16 and itself rounded to f16 (the CPU's table), 0 below -10 and the identity above 10.
//
// swiglu(float* gate, const float* up, int n)
// geglu(float* gate, const float* up, int n)
//   grid: (ceil(n / 256), 1, 1)   block: (256, 1, 1)   gate, up: n floats; gate is written
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

extern "C" __global__ void geglu(float* gate, const float* up, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const float x = gate[i];
    float y;
    if (x <= -10.0f) {
        y = 0.0f;
    } else if (x >= 10.0f) {
        y = x;
    } else {
        y = f16_to_f32(f32_to_f16(gelu_tanh(f16_to_f32(f32_to_f16(x)))));
    }
    gate[i] = y * up[i];
}
