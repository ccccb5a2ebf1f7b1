// Host build of the kernels that need no block-wide synchronisation or warp operations (rope,
// activation, elementwise, kv_cache .cu files, included whole), run one (block, thread) at a
// time, so tests/gpu.rs can compare their numbers with the engine's CPU ops without a GPU.
// Usage: host_kernels KERNEL ARGS... < input floats > output (see each command below).
#include "common.cuh"
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

struct Dim3 {
    unsigned x, y, z;
};
static Dim3 blockIdx, threadIdx, blockDim, gridDim;

#include "activation.cu"
#include "elementwise.cu"
#include "kv_cache.cu"
using std::max;
#include "rope.cu"

// Runs `body` for every thread of every block, one after another.
template <class F>
static void launch(Dim3 grid, Dim3 block, F body) {
    gridDim = grid;
    blockDim = block;
    for (unsigned bz = 0; bz < grid.z; bz++)
        for (unsigned by = 0; by < grid.y; by++)
            for (unsigned bx = 0; bx < grid.x; bx++)
                for (unsigned tz = 0; tz < block.z; tz++)
                    for (unsigned ty = 0; ty < block.y; ty++)
                        for (unsigned tx = 0; tx < block.x; tx++) {
                            blockIdx = {bx, by, bz};
                            threadIdx = {tx, ty, tz};
                            body();
                        }
}

template <class T>
static std::vector<T> read_n(size_t n) {
    std::vector<T> v(n);
    if (fread(v.data(), sizeof(T), n, stdin) != n) exit(3);
    return v;
}

template <class T>
static void write(const std::vector<T>& v) {
    fwrite(v.data(), sizeof(T), v.size(), stdout);
}

int main(int argc, char** argv) {
    if (argc < 2) return 2;
    const std::string k = argv[1];
    auto arg = [&](int i) { return atof(argv[i]); };
    if (k == "rope" && argc == 11) {
        // rope N_TOK N_HEADS HEAD_DIM N_DIMS NEOX THETA_SCALE FREQ_SCALE ATTN_FACTOR HAS_FF
        // stdin: x, pos (i32), [freq factors]; stdout: x
        const int n_tok = (int)arg(2), heads = (int)arg(3), hd = (int)arg(4), nd = (int)arg(5);
        auto x = read_n<float>((size_t)n_tok * heads * hd);
        auto pos = read_n<int>(n_tok);
        std::vector<float> ff;
        if (arg(10) != 0) ff = read_n<float>(nd / 2);
        launch({(unsigned)n_tok, (unsigned)heads, 1}, {(unsigned)nd / 2, 1, 1}, [&] {
            rope(x.data(), pos.data(), heads, hd, nd, (int)arg(6), (float)arg(7), (float)arg(8),
                 (float)arg(9), ff.empty() ? nullptr : ff.data());
        });
        write(x);
    } else if (k == "rope_multi" && argc == 14) {
        // rope_multi N_TOK N_HEADS HEAD_DIM N_DIMS NEOX THETA_SCALE FREQ_SCALE ATTN_FACTOR S0 S1 S2 S3
        // stdin: x, pos4 (4 i32 per token); stdout: x
        const int n_tok = (int)arg(2), heads = (int)arg(3), hd = (int)arg(4), nd = (int)arg(5);
        auto x = read_n<float>((size_t)n_tok * heads * hd);
        auto pos4 = read_n<int>((size_t)n_tok * 4);
        launch({(unsigned)n_tok, (unsigned)heads, 1}, {(unsigned)nd / 2, 1, 1}, [&] {
            rope_multi(x.data(), pos4.data(), heads, hd, nd, (int)arg(6), (float)arg(7),
                       (float)arg(8), (float)arg(9), (int)arg(10), (int)arg(11), (int)arg(12),
                       (int)arg(13));
        });
        write(x);
    } else if ((k == "swiglu" || k == "geglu") && argc == 3) {
        // swiglu|geglu N; stdin: gate, up; stdout: gate
        const int n = (int)arg(2);
        auto g = read_n<float>(n);
        auto u = read_n<float>(n);
        launch({(unsigned)(n + 255) / 256, 1, 1}, {256, 1, 1}, [&] {
            if (k == "swiglu")
                swiglu(g.data(), u.data(), n);
            else
                geglu(g.data(), u.data(), n);
        });
        write(g);
    } else if ((k == "gelu" || k == "gelu_quick" || k == "silu") && argc == 3) {
        // gelu|gelu_quick|silu N; stdin: x; stdout: x
        const int n = (int)arg(2);
        auto x = read_n<float>(n);
        launch({(unsigned)(n + 255) / 256, 1, 1}, {256, 1, 1}, [&] {
            if (k == "gelu")
                gelu(x.data(), n);
            else if (k == "gelu_quick")
                gelu_quick(x.data(), n);
            else
                silu(x.data(), n);
        });
        write(x);
    } else if (k == "softcap" && argc == 4) {
        // softcap N CAP; stdin: x; stdout: x
        const int n = (int)arg(2);
        const float cap = (float)arg(3);
        auto x = read_n<float>(n);
        launch({(unsigned)(n + 255) / 256, 1, 1}, {256, 1, 1},
               [&] { softcap(x.data(), 1.0f / cap, cap, n); });
        write(x);
    } else if (k == "kv_store" && argc == 5) {
        // kv_store N_TOK KV_DIM N_CTX; stdin: k, v, pos (i32); stdout: key cache, value cache
        const int n_tok = (int)arg(2), d = (int)arg(3), n_ctx = (int)arg(4);
        auto kk = read_n<float>((size_t)n_tok * d);
        auto vv = read_n<float>((size_t)n_tok * d);
        auto pos = read_n<int>(n_tok);
        std::vector<u16> kc((size_t)n_ctx * d), vc((size_t)n_ctx * d);
        launch({(unsigned)n_tok, 1, 1}, {256, 1, 1},
               [&] { kv_store(kk.data(), vv.data(), kc.data(), vc.data(), pos.data(), d); });
        write(kc);
        write(vc);
    } else {
        return 2;
    }
    return 0;
}
