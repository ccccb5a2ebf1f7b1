// GGUF block layouts on the device, the same bytes as src/quant/*.rs. Every weight type is read
// in units of 32 consecutive elements of a row: unit u of a row covers elements 32u..32u+31
// (a legacy block is one unit, a 256-element k-quant super-block is eight). `Q<T>::deq32(row, u,
// out)` writes a unit's 32 floats; `Q<T>::row_bytes(cols)` is a row's size. Weight rows are
// unaligned byte arrays, so every multi-byte field is read bytewise (load_u16/load_f16).
// Float rows (F32, F16) may end in a partial unit (an image encoder's 4304 columns); the
// kernels read units through `deq_unit`, which gives the elements past the row's end as 0.
#pragma once
#include "common.cuh"

enum WeightType { W_F32, W_F16, W_Q4_0, W_Q4_1, W_Q5_0, W_Q8_0, W_Q4_K, W_Q5_K, W_Q6_K };

template <int T> struct Q;

template <> struct Q<W_F32> {
    static __device__ __forceinline__ u64 row_bytes(int cols) { return (u64)cols * 4; }
    static __device__ __forceinline__ void deq32(const u8* row, int u, float* out) {
        const float* p = (const float*)(row + (u64)u * 128);
#pragma unroll
        for (int j = 0; j < 32; j++) out[j] = p[j];
    }
};

template <> struct Q<W_F16> {
    static __device__ __forceinline__ u64 row_bytes(int cols) { return (u64)cols * 2; }
    static __device__ __forceinline__ void deq32(const u8* row, int u, float* out) {
        const u8* p = row + (u64)u * 64;
#pragma unroll
        for (int j = 0; j < 32; j++) out[j] = load_f16(p + 2 * j);
    }
};

// 18 bytes: d (f16), 16 bytes of nibbles; x = (q - 8) * d, low nibbles first.
template <> struct Q<W_Q4_0> {
    static __device__ __forceinline__ u64 row_bytes(int cols) { return (u64)(cols / 32) * 18; }
    static __device__ __forceinline__ void deq32(const u8* row, int u, float* out) {
        const u8* b = row + (u64)u * 18;
        const float d = load_f16(b);
#pragma unroll
        for (int j = 0; j < 16; j++) {
            const int q = b[2 + j];
            out[j] = (float)((q & 15) - 8) * d;
            out[j + 16] = (float)((q >> 4) - 8) * d;
        }
    }
};

// 20 bytes: d, m (f16), 16 bytes of nibbles; x = q * d + m.
template <> struct Q<W_Q4_1> {
    static __device__ __forceinline__ u64 row_bytes(int cols) { return (u64)(cols / 32) * 20; }
    static __device__ __forceinline__ void deq32(const u8* row, int u, float* out) {
        const u8* b = row + (u64)u * 20;
        const float d = load_f16(b), m = load_f16(b + 2);
#pragma unroll
        for (int j = 0; j < 16; j++) {
            const int q = b[4 + j];
            out[j] = (float)(q & 15) * d + m;
            out[j + 16] = (float)(q >> 4) * d + m;
        }
    }
};

// 22 bytes: d (f16), qh (u32 LE: the fifth bit of each element), 16 bytes of nibbles;
// x = (q - 16) * d.
template <> struct Q<W_Q5_0> {
    static __device__ __forceinline__ u64 row_bytes(int cols) { return (u64)(cols / 32) * 22; }
    static __device__ __forceinline__ void deq32(const u8* row, int u, float* out) {
        const u8* b = row + (u64)u * 22;
        const float d = load_f16(b);
        const u32 qh = (u32)b[2] | ((u32)b[3] << 8) | ((u32)b[4] << 16) | ((u32)b[5] << 24);
#pragma unroll
        for (int j = 0; j < 16; j++) {
            const int q = b[6 + j];
            const int lo = (q & 15) | (((qh >> j) & 1) << 4);
            const int hi = (q >> 4) | (((qh >> (j + 16)) & 1) << 4);
            out[j] = (float)(lo - 16) * d;
            out[j + 16] = (float)(hi - 16) * d;
        }
    }
};

// 34 bytes: d (f16), 32 signed bytes; x = q * d.
template <> struct Q<W_Q8_0> {
    static __device__ __forceinline__ u64 row_bytes(int cols) { return (u64)(cols / 32) * 34; }
    static __device__ __forceinline__ void deq32(const u8* row, int u, float* out) {
        const u8* b = row + (u64)u * 34;
        const float d = load_f16(b);
#pragma unroll
        for (int j = 0; j < 32; j++) out[j] = (float)(i8)b[2 + j] * d;
    }
};

// The 6-bit scale and minimum of sub-block s (0..8) packed in a k-quant's 12 scale bytes.
__device__ __forceinline__ void k_scale_min(const u8* q, int s, int* sc, int* m) {
    if (s < 4) {
        *sc = q[s] & 63;
        *m = q[s + 4] & 63;
    } else {
        *sc = (q[s + 4] & 15) | ((q[s - 4] >> 6) << 4);
        *m = (q[s + 4] >> 4) | ((q[s] >> 6) << 4);
    }
}

// 144 bytes: d, dmin (f16), 12 scale bytes, 128 bytes of nibbles (each 64 elements: 32 bytes,
// low nibbles then high); x = d * sc * q - dmin * m per 32-element sub-block.
template <> struct Q<W_Q4_K> {
    static __device__ __forceinline__ u64 row_bytes(int cols) { return (u64)(cols / 256) * 144; }
    static __device__ __forceinline__ void deq32(const u8* row, int u, float* out) {
        const u8* b = row + (u64)(u >> 3) * 144;
        const int s = u & 7;
        int sc, m;
        k_scale_min(b + 4, s, &sc, &m);
        const float d1 = load_f16(b) * (float)sc, m1 = load_f16(b + 2) * (float)m;
        const u8* qs = b + 16 + (s >> 1) * 32;
        const int shift = (s & 1) * 4;
#pragma unroll
        for (int l = 0; l < 32; l++) out[l] = d1 * (float)((qs[l] >> shift) & 15) - m1;
    }
};

// 176 bytes: d, dmin, 12 scale bytes, qh[32] (bit s of qh[l]: the fifth bit of element 32s+l),
// qs[128] as in q4_K.
template <> struct Q<W_Q5_K> {
    static __device__ __forceinline__ u64 row_bytes(int cols) { return (u64)(cols / 256) * 176; }
    static __device__ __forceinline__ void deq32(const u8* row, int u, float* out) {
        const u8* b = row + (u64)(u >> 3) * 176;
        const int s = u & 7;
        int sc, m;
        k_scale_min(b + 4, s, &sc, &m);
        const float d1 = load_f16(b) * (float)sc, m1 = load_f16(b + 2) * (float)m;
        const u8* qh = b + 16;
        const u8* qs = b + 48 + (s >> 1) * 32;
        const int shift = (s & 1) * 4;
#pragma unroll
        for (int l = 0; l < 32; l++) {
            const int q = ((qs[l] >> shift) & 15) | (((qh[l] >> s) & 1) << 4);
            out[l] = d1 * (float)q - m1;
        }
    }
};

// 210 bytes: ql[128] (low nibbles), qh[64] (2 high bits), 16 signed scales, d (f16);
// x = d * scale[i / 16] * (q - 32).
template <> struct Q<W_Q6_K> {
    static __device__ __forceinline__ u64 row_bytes(int cols) { return (u64)(cols / 256) * 210; }
    static __device__ __forceinline__ void deq32(const u8* row, int u, float* out) {
        const u8* b = row + (u64)(u >> 3) * 210;
        const int s = u & 7;
        const int half = s >> 2, quarter = s & 3;
        const u8* ql = b + half * 64 + (quarter & 1) * 32;
        const u8* qh = b + 128 + half * 32;
        const float d = load_f16(b + 208);
        const float d0 = d * (float)(i8)b[192 + 2 * s], d1 = d * (float)(i8)b[192 + 2 * s + 1];
        const int lshift = (quarter >> 1) * 4, hshift = 2 * quarter;
#pragma unroll
        for (int l = 0; l < 32; l++) {
            const int q = ((ql[l] >> lshift) & 15) | (((qh[l] >> hshift) & 3) << 4);
            out[l] = (l < 16 ? d0 : d1) * (float)(q - 32);
        }
    }
};

// Instantiates MACRO(suffix, type) for every weight type: one extern "C" kernel per type.
#define FOR_EACH_WEIGHT_TYPE(MACRO) \
    MACRO(f32, W_F32)               \
    MACRO(f16, W_F16)               \
    MACRO(q4_0, W_Q4_0)             \
    MACRO(q4_1, W_Q4_1)             \
    MACRO(q5_0, W_Q5_0)             \
    MACRO(q8_0, W_Q8_0)             \
    MACRO(q4_k, W_Q4_K)             \
    MACRO(q5_k, W_Q5_K)             \
    MACRO(q6_k, W_Q6_K)

// Unit u of a row of `cols` elements, the elements past `cols` as 0 (only float rows can end in a
// partial unit: a quantized row is whole blocks).
template <int T>
__device__ __forceinline__ void deq_unit(const u8* row, int u, int cols, float* out) {
    if constexpr (T == W_F32 || T == W_F16) {
        const int n = cols - u * 32;
        if (n < 32) {
            for (int j = 0; j < 32; j++) {
                const int c = u * 32 + j;
                if (j >= n) {
                    out[j] = 0.0f;
                } else if (T == W_F32) {
                    out[j] = ((const float*)row)[c];
                } else {
                    out[j] = load_f16(row + 2 * (u64)c);
                }
            }
            return;
        }
    }
    Q<T>::deq32(row, u, out);
}
