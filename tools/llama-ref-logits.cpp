// Teacher-forced logits from llama.cpp, for the synthetic-family references (see
// tools/make-family-refs.sh, which builds and runs this).
//
//   llama-ref-logits MODEL N_CTX batch|single TOKENS_FILE OUT_FILE [LORA:SCALE...]
//
// Feeds the whitespace-separated token ids of TOKENS_FILE into a fresh context of N_CTX
// positions, asking for the logits of every position, and writes them to OUT_FILE as raw
// little-endian f32, n_tokens rows of n_vocab. `batch` decodes the whole sequence in one call
// (one micro-batch: n_batch = n_ubatch = 512), `single` one token per call; the difference
// between the two is llama.cpp's own numerical noise on the model. Two threads, flash attention
// left at llama.cpp's default, as in the other references of this project. Each LORA:SCALE
// loads a LoRA adapter and applies it at SCALE (tools/make-lora-refs.sh).

#include "llama.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

static void quiet(enum ggml_log_level level, const char * text, void *) {
    if (level >= GGML_LOG_LEVEL_ERROR) {
        fputs(text, stderr);
    }
}

int main(int argc, char ** argv) {
    if (argc < 6) {
        fprintf(stderr, "usage: %s MODEL N_CTX batch|single TOKENS_FILE OUT_FILE [LORA:SCALE...]\n", argv[0]);
        return 2;
    }
    const std::string mode = argv[3];
    if (mode != "batch" && mode != "single") {
        fprintf(stderr, "mode must be batch or single, not %s\n", mode.c_str());
        return 2;
    }
    std::vector<llama_token> tokens;
    {
        std::ifstream in(argv[4]);
        long id;
        while (in >> id) {
            tokens.push_back((llama_token) id);
        }
    }
    if (tokens.empty() || tokens.size() > 512) {
        fprintf(stderr, "need 1..512 token ids in %s\n", argv[4]);
        return 2;
    }

    llama_log_set(quiet, nullptr);
    llama_backend_init();
    llama_model_params mp = llama_model_default_params();
    mp.progress_callback = [](float, void *) { return true; };
    llama_model * model = llama_model_load_from_file(argv[1], mp);
    if (!model) {
        fprintf(stderr, "cannot load %s\n", argv[1]);
        return 1;
    }
    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = (uint32_t) atoi(argv[2]);
    cp.n_batch = 512;
    cp.n_ubatch = 512;
    cp.n_seq_max = 1;
    cp.n_threads = 2;
    cp.n_threads_batch = 2;
    cp.no_perf = true;
    llama_context * ctx = llama_init_from_model(model, cp);
    if (!ctx) {
        fprintf(stderr, "cannot create a context\n");
        return 1;
    }
    std::vector<llama_adapter_lora *> loras;
    std::vector<float> scales;
    for (int a = 6; a < argc; a++) {
        const char * colon = strrchr(argv[a], ':');
        if (!colon) {
            fprintf(stderr, "expected LORA:SCALE, not %s\n", argv[a]);
            return 2;
        }
        const std::string path(argv[a], colon - argv[a]);
        llama_adapter_lora * lora = llama_adapter_lora_init(model, path.c_str());
        if (!lora) {
            fprintf(stderr, "cannot load the LoRA adapter %s\n", path.c_str());
            return 1;
        }
        loras.push_back(lora);
        scales.push_back((float) atof(colon + 1));
    }
    if (!loras.empty() && llama_set_adapters_lora(ctx, loras.data(), loras.size(), scales.data()) != 0) {
        fprintf(stderr, "cannot apply the LoRA adapters\n");
        return 1;
    }
    const int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
    const int n = (int) tokens.size();
    std::vector<float> out((size_t) n * n_vocab);

    const int step = mode == "batch" ? n : 1;
    llama_batch batch = llama_batch_init(step, 0, 1);
    for (int start = 0; start < n; start += step) {
        batch.n_tokens = 0;
        for (int i = start; i < start + step; i++) {
            const int j = batch.n_tokens++;
            batch.token[j] = tokens[i];
            batch.pos[j] = i;
            batch.n_seq_id[j] = 1;
            batch.seq_id[j][0] = 0;
            batch.logits[j] = 1;
        }
        if (llama_decode(ctx, batch) != 0) {
            fprintf(stderr, "llama_decode failed at position %d\n", start);
            return 1;
        }
        for (int j = 0; j < step; j++) {
            const float * row = llama_get_logits_ith(ctx, j);
            std::copy(row, row + n_vocab, out.begin() + (size_t) (start + j) * n_vocab);
        }
    }
    llama_batch_free(batch);

    FILE * f = fopen(argv[5], "wb");
    if (!f || fwrite(out.data(), sizeof(float), out.size(), f) != out.size() || fclose(f) != 0) {
        fprintf(stderr, "cannot write %s\n", argv[5]);
        return 1;
    }
    llama_free(ctx);
    llama_model_free(model);
    llama_backend_free();
    return 0;
}
