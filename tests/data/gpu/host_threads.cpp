// Threaded host build of the kernels that synchronise (matvec, matmul, rms_norm, layer_norm,
// attention, get_rows, argmax, softmax) for tests/gpu.rs: every CUDA thread of a block is a
// std::thread, __syncthreads a barrier of the block, __shfl_xor_sync an exchange through memory
// between barriers of the warp. Blocks run one after another. Slow, exact in its semantics, and
// enough to check the kernels' indexing and arithmetic against the engine without a GPU.
// Usage: host_threads KERNEL ARGS... < input > output (see each command below).
#define HOST_THREADS 1
#include <algorithm>
#include <barrier>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

struct Dim3 {
    unsigned x, y, z;
};
static thread_local Dim3 threadIdx;
static Dim3 blockIdx, blockDim, gridDim;
static std::unique_ptr<std::barrier<>> block_barrier;
static std::vector<std::unique_ptr<std::barrier<>>> warp_barriers;

static inline void __syncthreads() { block_barrier->arrive_and_wait(); }

template <class T>
static T __shfl_xor_sync(unsigned, T v, int lane_mask) {
    static T slots[1024];
    const unsigned t = threadIdx.x;
    slots[t] = v;
    warp_barriers[t / 32]->arrive_and_wait();
    const T r = slots[t ^ (unsigned)lane_mask];
    warp_barriers[t / 32]->arrive_and_wait();
    return r;
}

static inline float __int_as_float(unsigned bits) {
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
}
using std::max;
using std::min;
#define __shared__ static

#include "common.cuh"
#include "attention.cu"
#include "embed.cu"
#include "logits.cu"
#include "matmul.cu"
#include "matvec.cu"
#include "norm.cu"

// Runs every block in turn, each block's threads at once.
template <class F>
static void launch(Dim3 grid, unsigned threads, F body) {
    gridDim = grid;
    blockDim = {threads, 1, 1};
    for (unsigned by = 0; by < grid.y; by++)
        for (unsigned bx = 0; bx < grid.x; bx++) {
            blockIdx = {bx, by, 0};
            block_barrier = std::make_unique<std::barrier<>>(threads);
            warp_barriers.clear();
            for (unsigned w = 0; w < threads / 32; w++)
                warp_barriers.push_back(std::make_unique<std::barrier<>>(32));
            std::vector<std::thread> pool;
            for (unsigned t = 0; t < threads; t++)
                pool.emplace_back([t, &body] {
                    threadIdx = {t, 0, 0};
                    body();
                });
            for (auto& th : pool) th.join();
        }
}

template <class T>
static std::vector<T> read_n(size_t n) {
    std::vector<T> v(n);
    if (n && fread(v.data(), sizeof(T), n, stdin) != n) exit(3);
    return v;
}

template <class T>
static void write(const std::vector<T>& v) {
    fwrite(v.data(), sizeof(T), v.size(), stdout);
}

template <int T>
static int products(bool tiled, int rows, int cols, int n_tok) {
    auto w = read_n<u8>((size_t)rows * Q<T>::row_bytes(cols));
    auto x = read_n<float>((size_t)n_tok * cols);
    std::vector<float> y((size_t)n_tok * rows, NAN);
    if (tiled)
        launch({(unsigned)(rows + 63) / 64, (unsigned)(n_tok + 63) / 64, 1}, 256,
               [&] { matmul<T>(w.data(), x.data(), y.data(), rows, cols, n_tok); });
    else
        launch({(unsigned)(rows + 3) / 4, 1, 1}, 128,
               [&] { matvec<T>(w.data(), x.data(), y.data(), rows, cols, n_tok); });
    write(y);
    return 0;
}

template <int T>
static int embed_rows(int vocab, int cols, int n, float scale) {
    auto w = read_n<u8>((size_t)vocab * Q<T>::row_bytes(cols));
    auto ids = read_n<int>(n);
    std::vector<float> out((size_t)n * cols, NAN);
    launch({(unsigned)n, 1, 1}, 128, [&] { get_rows<T>(w.data(), ids.data(), out.data(), cols, scale); });
    write(out);
    return 0;
}

int main(int argc, char** argv) {
    if (argc < 2) return 2;
    const std::string k = argv[1];
    auto arg = [&](int i) { return atof(argv[i]); };
    if ((k == "matvec" || k == "matmul") && argc == 6) {
        // matvec|matmul TYPE ROWS COLS N_TOK; stdin: weights, x; stdout: y
        const bool tiled = k == "matmul";
        const int rows = (int)arg(3), cols = (int)arg(4), n = (int)arg(5);
#define PRODUCTS(name, type) \
    if (strcmp(argv[2], #name) == 0) return products<type>(tiled, rows, cols, n);
        FOR_EACH_WEIGHT_TYPE(PRODUCTS)
        return 2;
    }
    if (k == "get_rows" && argc == 7) {
        // get_rows TYPE VOCAB COLS N SCALE; stdin: weights, ids (i32); stdout: rows
#define EMBED(name, type) \
    if (strcmp(argv[2], #name) == 0) return embed_rows<type>((int)arg(3), (int)arg(4), (int)arg(5), (float)arg(6));
        FOR_EACH_WEIGHT_TYPE(EMBED)
        return 2;
    }
    if (k == "rms_norm" && argc == 5) {
        // rms_norm ROWS COLS EPS; stdin: x, w; stdout: out
        const int rows = (int)arg(2), cols = (int)arg(3);
        auto x = read_n<float>((size_t)rows * cols);
        auto w = read_n<float>(cols);
        std::vector<float> out(x.size(), NAN);
        launch({(unsigned)rows, 1, 1}, 256, [&] { rms_norm(x.data(), w.data(), out.data(), cols, (float)arg(4)); });
        write(out);
        return 0;
    }
    if (k == "layer_norm" && argc == 5) {
        // layer_norm ROWS COLS EPS; stdin: x, w, b; stdout: out
        const int rows = (int)arg(2), cols = (int)arg(3);
        auto x = read_n<float>((size_t)rows * cols);
        auto w = read_n<float>(cols);
        auto b = read_n<float>(cols);
        std::vector<float> out(x.size(), NAN);
        launch({(unsigned)rows, 1, 1}, 256,
               [&] { layer_norm(x.data(), w.data(), b.data(), out.data(), cols, (float)arg(4)); });
        write(out);
        return 0;
    }
    if (k == "attention" && argc == 11) {
        // attention N_TOK N_HEAD N_HEAD_KV HEAD_DIM N_CTX SCALE SOFTCAP WINDOW SEE_UNTIL
        // stdin: q, k cache (u16), v cache (u16), pos (i32); stdout: out
        const int n_tok = (int)arg(2), nh = (int)arg(3), nkv = (int)arg(4), hd = (int)arg(5), n_ctx = (int)arg(6);
        auto q = read_n<float>((size_t)n_tok * nh * hd);
        auto kc = read_n<u16>((size_t)n_ctx * nkv * hd);
        auto vc = read_n<u16>((size_t)n_ctx * nkv * hd);
        auto pos = read_n<int>(n_tok);
        std::vector<float> out(q.size(), NAN);
        launch({(unsigned)nh, (unsigned)n_tok, 1}, 128, [&] {
            attention(q.data(), kc.data(), vc.data(), out.data(), pos.data(), nh, nkv, hd, (float)arg(7),
                      (float)arg(8), (int)arg(9), (int)arg(10));
        });
        write(out);
        return 0;
    }
    if ((k == "argmax" || k == "softmax") && argc == 4) {
        // argmax|softmax ROWS N; stdin: x; stdout: indices (i32) or x
        const int rows = (int)arg(2), n = (int)arg(3);
        auto x = read_n<float>((size_t)rows * n);
        if (k == "argmax") {
            std::vector<int> idx(rows, -1);
            launch({(unsigned)rows, 1, 1}, 1024, [&] { argmax(x.data(), n, idx.data()); });
            write(idx);
        } else {
            launch({(unsigned)rows, 1, 1}, 1024, [&] { softmax(x.data(), n); });
            write(x);
        }
        return 0;
    }
    return 2;
}
