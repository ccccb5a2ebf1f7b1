// Shared device helpers for every kernel in gpu-src/: fixed-width integer names (NVRTC has no
// standard headers), f16 <-> f32 conversion through PTX `cvt` (no cuda_fp16.h needed), and warp
// and block reductions. Included by the .cu files; tools/build-ptx.py and the runtime's
// --recompile hand it to NVRTC as a named header.
#pragma once

typedef unsigned char u8;
typedef signed char i8;
typedef unsigned short u16;
typedef unsigned int u32;
typedef int i32;
typedef unsigned long long u64;

// -infinity (NVRTC has no math.h macros).
#define NEG_INF __int_as_float(0xff800000)

#ifdef __CUDA_ARCH__
// IEEE half bits to float (exact).
__device__ __forceinline__ float f16_to_f32(u16 h) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
}

// Float to IEEE half bits, round to nearest even (as the CPU cache's f16::from_f32).
__device__ __forceinline__ u16 f32_to_f16(float f) {
    u16 h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
}

#else
// A host build of the headers (tests/data/gpu/host_quant.cpp, which checks the block decoding
// against the Rust engine): the same conversions in portable C++. Never seen by NVRTC.
#include <cstring>
#define __device__
#define __global__
#define __forceinline__ inline
static inline float f16_to_f32(u16 h) {
    u32 sign = (u32)(h >> 15) << 31, exp = (h >> 10) & 0x1f, man = h & 0x3ff, bits;
    if (exp == 0 && man == 0) {
        bits = sign;
    } else if (exp == 0) {  // subnormal: normalise
        int e = -1;
        do {
            man <<= 1;
            e++;
        } while (!(man & 0x400));
        bits = sign | ((u32)(127 - 15 - e) << 23) | ((man & 0x3ff) << 13);
    } else if (exp == 31) {
        bits = sign | 0x7f800000u | (man << 13);
    } else {
        bits = sign | ((exp + 112) << 23) | (man << 13);
    }
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
}

// Round to nearest even, as cvt.rn.f16.f32.
static inline u16 f32_to_f16(float f) {
    u32 x;
    std::memcpy(&x, &f, 4);
    const u32 sign = (x >> 16) & 0x8000, a = x & 0x7fffffff;
    if (a > 0x7f800000) return (u16)(sign | 0x7e00);  // NaN
    if (a >= 0x477ff000) return (u16)(sign | 0x7c00);  // rounds past 65504: infinity
    if (a < 0x38800000) {                               // a half subnormal, or zero
        if (a < 0x33000000) return (u16)sign;
        const u32 e = a >> 23, m = (a & 0x7fffff) | 0x800000, shift = 126 - e;
        u32 r = m >> shift;
        const u32 rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (r & 1))) r++;
        return (u16)(sign | r);
    }
    u32 r = (a >> 13) - (112u << 10);
    const u32 rem = a & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (r & 1))) r++;
    return (u16)(sign | r);
}
#endif

// A little-endian u16 at any byte address (block fields are not aligned).
__device__ __forceinline__ u16 load_u16(const u8* p) {
    return (u16)p[0] | ((u16)p[1] << 8);
}

// A little-endian f16 field at any byte address, as float.
__device__ __forceinline__ float load_f16(const u8* p) {
    return f16_to_f32(load_u16(p));
}

// Device code, or the threaded host build of tests/data/gpu/host_threads.cpp, which supplies
// __shfl_xor_sync and __syncthreads.
#if defined(__CUDA_ARCH__) || defined(HOST_THREADS)
__device__ __forceinline__ float warp_sum(float v) {
    for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
    return v;
}

__device__ __forceinline__ float warp_max(float v) {
    for (int off = 16; off > 0; off >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
    return v;
}

// Sum over the whole block (blockDim.x a multiple of 32, at most 1024); every thread gets it.
// `shared` holds 32 floats. Contains __syncthreads: call from every thread.
__device__ __forceinline__ float block_sum(float v, float* shared) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    v = warp_sum(v);
    __syncthreads();
    if (lane == 0) shared[warp] = v;
    __syncthreads();
    const int n_warps = blockDim.x >> 5;
    v = lane < n_warps ? shared[lane] : 0.0f;
    return warp_sum(v);
}

// Maximum over the whole block, as block_sum.
__device__ __forceinline__ float block_max(float v, float* shared) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    v = warp_max(v);
    __syncthreads();
    if (lane == 0) shared[warp] = v;
    __syncthreads();
    const int n_warps = blockDim.x >> 5;
    v = lane < n_warps ? shared[lane] : NEG_INF;
    return warp_max(v);
}
#endif  // __CUDA_ARCH__
