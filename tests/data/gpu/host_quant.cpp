// Host build of gpu-src/quant.cuh for tests/gpu.rs: decodes weight rows with the very
// Q<T>::deq32 the kernels use, so the block layouts are checked against the Rust engine's
// dequantization without a GPU. Usage: host_quant TYPE COLS < rows > floats (little-endian
// f32, every row's units in order). TYPE is a FOR_EACH_WEIGHT_TYPE suffix (q4_k, f16, ...).
#include "quant.cuh"
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

template <int T>
static int decode(int cols) {
    std::vector<unsigned char> in;
    unsigned char buf[65536];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, stdin)) > 0) in.insert(in.end(), buf, buf + n);
    const size_t row_bytes = Q<T>::row_bytes(cols);
    if (row_bytes == 0 || in.size() % row_bytes != 0) return 2;
    for (size_t r = 0; r < in.size() / row_bytes; r++) {
        for (int u = 0; u < cols / 32; u++) {
            float out[32];
            Q<T>::deq32(in.data() + r * row_bytes, u, out);
            fwrite(out, 4, 32, stdout);
        }
    }
    return 0;
}

int main(int argc, char** argv) {
    if (argc != 3) return 2;
    const int cols = atoi(argv[2]);
#define DISPATCH(name, type) \
    if (strcmp(argv[1], #name) == 0) return decode<type>(cols);
    FOR_EACH_WEIGHT_TYPE(DISPATCH)
    return 2;
}
