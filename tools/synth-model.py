#!/usr/bin/env python3
"""Tiny synthetic GGUF models, one per architecture family (dense and mixture-of-experts), for checking the forward pass
against llama.cpp where no small real model of the family exists.

Each model has a few layers of small width, weights from a seeded generator (splitmix64, written
out here so the bytes never depend on numpy's generator versions), and the vocabulary and
tokenizer metadata of SmolLM2-135M-Instruct copied in, so llama.cpp and this engine both load it
as a complete model. Tensor names, shapes and metadata keys are those llama.cpp's loader expects
for the architecture. The same arguments always give the same bytes (tests/families.rs checks
the SHA-256 recorded with the reference logits).

    tools/synth-model.py FAMILY TYPE OUT.gguf [--vocab-from SMOLLM2.gguf]
    tools/synth-model.py --mmproj FAMILY TYPE OUT.gguf   (a vision projector: llava, gemma3,
                                                          smolvlm, pixtral, mistral3, qwen2vl,
                                                          qwen25vl, llama4, minicpmv,
                                                          minicpmv25)
    tools/synth-model.py --lora NAME FAMILY f16 OUT.gguf   (a LoRA adapter for FAMILY's model:
                                                          see LORAS)
    tools/synth-model.py --list

The `qwen3-rerank` families are Qwen3 rerankers as llama.cpp's converter writes them: rank
pooling, the labels "yes" and "no", and a two-row classification head `cls.output.weight`
(random here, rather than rows of a language-model head); `qwen3-rerank` carries Qwen3-Reranker's
`rerank` chat template, `qwen3-rerank-plain` none (llama-server then joins query and document
with the vocabulary's BOS/EOS/SEP rules).

TYPE is f16 or q8_0 (2-D and 3-D expert weights; norms, RoPE factors and the expert routers stay
f32, as llama.cpp's converter and llama-quantize keep them). Q8_0 is quantized here, with
ggml's rounding, rather than by the gguf package, for the same reason as the generator. The
file layout is the gguf package's writer's: tests/data/families was made with gguf 0.19.0, which
.ci/run pins.
"""

import argparse
import os
import sys

import numpy as np

import gguf

SMOLLM2 = os.path.expanduser(
    os.path.join(
        os.environ.get("LLAMAFILE_MODELS", "~/.cache/llamafile-rs/models"),
        "SmolLM2-135M-Instruct.Q4_1.gguf",
    )
)

# Each family: architecture name, hyper-parameters, and which optional features its files carry.
FAMILIES = {
    # Llama 3.1/3.2: llama3 RoPE scaling baked into rope_freqs.weight, GQA, untied output.
    "llama3": dict(arch="llama", n_embd=256, n_head=4, n_head_kv=2, head_dim=64, n_ff=512,
                   n_layer=3, rope_base=500000.0, rope_freqs=True, output=True),
    # Mistral-style: llama architecture, head_dim given by key_length (q width != n_embd),
    # a single KV head, base 1e6, no rope_freqs.
    "mistral": dict(arch="llama", n_embd=192, n_head=4, n_head_kv=1, head_dim=64, n_ff=384,
                    n_layer=3, rope_base=1000000.0, key_length=True, output=True),
    # The json_request fuzz target's server model (tools/fuzz.sh): the smallest llama that
    # still has GQA, and the vocabulary's first 4,096 tokens (the merges among them), so a
    # request's cost is its parsing rather than the output layer and the sampler's passes over
    # the vocabulary.
    "fuzz": dict(arch="llama", n_embd=64, n_head=2, n_head_kv=1, head_dim=32, n_ff=128,
                 n_layer=1, rope_base=10000.0, output=True, vocab_limit=4096),
    # Qwen3: QK-norm, no biases, NEOX RoPE, tied output.
    "qwen3": dict(arch="qwen3", n_embd=256, n_head=4, n_head_kv=2, head_dim=64, n_ff=512,
                  n_layer=3, rope_base=1000000.0, key_length=True, qk_norm=True),
    # Qwen3 rerankers (see the module doc): qwen3's shape with a classification head.
    "qwen3-rerank": dict(arch="qwen3", n_embd=256, n_head=4, n_head_kv=2, head_dim=64, n_ff=512,
                         n_layer=3, rope_base=1000000.0, key_length=True, qk_norm=True,
                         rerank=True, rerank_template=True),
    "qwen3-rerank-plain": dict(arch="qwen3", n_embd=256, n_head=4, n_head_kv=2, head_dim=64,
                               n_ff=512, n_layer=3, rope_base=1000000.0, key_length=True,
                               qk_norm=True, rerank=True),
    # Gemma 2: soft-capping of attention scores and final logits, sliding window on even layers,
    # post-norms, GELU, embeddings scaled by sqrt(n_embd), output tied to the embeddings.
    "gemma2": dict(arch="gemma2", n_embd=256, n_head=4, n_head_kv=2, head_dim=64, n_ff=512,
                   n_layer=4, rope_base=10000.0, key_length=True, post_norms=True,
                   sliding_window=24, attn_softcap=4.0, final_softcap=30.0),
    # Phi-3 (128k-style): fused QKV and gate/up, LongRoPE short and long factors with their
    # attention factor; original context 256, so a context above that selects the long factors.
    "phi3": dict(arch="phi3", n_embd=256, n_head=4, n_head_kv=2, head_dim=64, n_ff=512,
                 n_layer=3, rope_base=10000.0, fused=True, longrope=True, output=True,
                 n_ctx_orig=256, n_ctx_train=4096),
    # Mixtral-style: the llama architecture with 4 experts, 2 per token, renormalised weights;
    # feed_forward_length is the experts' width.
    "mixtral": dict(arch="llama", n_embd=256, n_head=4, n_head_kv=2, head_dim=64, n_ff=256,
                    n_layer=3, rope_base=1000000.0, output=True, n_expert=4, n_expert_used=2),
    # Qwen2-MoE: 8 experts of width 128, 2 per token, not renormalised; a shared expert of
    # width 256 behind a sigmoid gate; Q/K/V biases.
    "qwen2moe": dict(arch="qwen2moe", n_embd=256, n_head=4, n_head_kv=2, head_dim=64, n_ff=512,
                     n_layer=3, rope_base=1000000.0, output=True, qkv_bias=True, n_expert=8,
                     n_expert_used=2, n_ff_exp=128, n_ff_shexp=256),
    # Qwen3-MoE: 8 experts of width 128, 2 per token, renormalised; QK-norm.
    "qwen3moe": dict(arch="qwen3moe", n_embd=256, n_head=4, n_head_kv=2, head_dim=64, n_ff=512,
                     n_layer=3, rope_base=1000000.0, key_length=True, qk_norm=True, output=True,
                     n_expert=8, n_expert_used=2, n_ff_exp=128),
    # DeepSeek-V2-Lite-style: multi-head latent attention with a plain wq (q_lora_rank 0),
    # YaRN RoPE with mscale_all_dim 0.707, one leading dense layer, then 8 experts (2 per token,
    # softmax, not renormalised, scale 1) and 2 shared experts.
    "deepseek2": dict(arch="deepseek2", n_embd=256, n_head=4, n_head_kv=1, n_ff=512, n_layer=3,
                      rope_base=10000.0, output=True, mla=dict(q_lora=0, kv_lora=96, nope=64,
                      rope=32, v_head=64), yarn=dict(factor=8.0, orig_ctx=256, mscale_all_dim=0.707),
                      n_dense_lead=1, n_expert=8, n_expert_used=2, n_ff_exp=128, n_shared=2,
                      gating=1, weights_norm=False, weights_scale=1.0),
    # DeepSeek-V3-style: the query through its low-rank pair, sigmoid gating with a selection
    # bias (exp_probs_b), group-limited routing (16 experts in 4 groups, the best 2 groups, 3
    # experts per token), renormalised and scaled weights, one shared expert, YaRN with
    # mscale_all_dim 1.
    "deepseek3": dict(arch="deepseek2", n_embd=256, n_head=4, n_head_kv=1, n_ff=512, n_layer=3,
                      rope_base=10000.0, output=True, mla=dict(q_lora=96, kv_lora=96, nope=64,
                      rope=32, v_head=64), yarn=dict(factor=8.0, orig_ctx=256, mscale_all_dim=1.0),
                      n_dense_lead=1, n_expert=16, n_expert_used=3, n_ff_exp=64, n_shared=1,
                      gating=2, probs_bias=True, groups=(4, 2), weights_norm=True,
                      weights_scale=2.5),
    # LLaVA 1.5's text side (a llama) for the synthetic `mlp` projector below (--mmproj): the
    # projector's output width is this model's n_embd.
    "llava": dict(arch="llama", n_embd=256, n_head=4, n_head_kv=2, head_dim=64, n_ff=512,
                  n_layer=2, rope_base=10000.0, output=True,
                  mmproj=dict(type="mlp", image_size=84, patch_size=14, n_embd=128, n_head=4,
                              n_ff=320, n_layer=4, eps=1e-5)),
    # Gemma 3's text side (QK-norm, post-norms, GELU, no sliding window, tied output, its image
    # markers added to the vocabulary) for the synthetic `gemma3` projector: SigLIP at 224 with
    # 14-pixel patches, the 16x16 grid pooled by the default 4 (no scale_factor key, as real
    # files) into 16 image tokens. Embeddings of amplitude 1/n_embd (1/sqrt(n_embd) once scaled):
    # at 1 they drown the blocks' outputs and the tied head echoes the last token, whatever the
    # image.
    "gemma3": dict(arch="gemma3", n_embd=256, n_head=4, n_head_kv=2, head_dim=64, n_ff=512,
                   n_layer=2, rope_base=1000000.0, key_length=True, qk_norm=True,
                   post_norms=True, embd_amp=1.0 / 256,
                   extra_tokens=["<start_of_image>", "<end_of_image>"],
                   mmproj=dict(type="gemma3", image_size=224, patch_size=14, n_embd=128,
                               n_head=4, n_ff=320, n_layer=3, eps=1e-6)),
    # A wider Gemma 3 projector for timing the encoder (tests/vision_bench.rs), about
    # SigLIP-base's size: width 768, 12 blocks, 196 patches pooled by 2 into 49 tokens.
    "gemma3-base": dict(arch="gemma3", n_embd=256, n_head=4, n_head_kv=2, head_dim=64,
                        n_ff=512, n_layer=2, rope_base=1000000.0, key_length=True,
                        qk_norm=True, post_norms=True,
                        mmproj=dict(type="gemma3", image_size=224, patch_size=16, n_embd=768,
                                    n_head=12, n_ff=3072, n_layer=12, eps=1e-6,
                                    scale_factor=2)),
    # SmolVLM's text side (a llama, with Idefics3's image tokens added to the vocabulary) for
    # the synthetic `idefics3` projector: 128-pixel tiles of 16-pixel patches shuffled by 2
    # into 16 tokens per tile; images resized to a longest side of 256 (up to 2x2 tiles).
    "smolvlm": dict(arch="llama", n_embd=256, n_head=4, n_head_kv=2, head_dim=64, n_ff=512,
                    n_layer=2, rope_base=100000.0, output=True,
                    extra_tokens=["<fake_token_around_image>", "<global-img>"]
                    + [f"<row_{r}_col_{c}>" for r in range(1, 5) for c in range(1, 5)],
                    mmproj=dict(type="idefics3", image_size=128, patch_size=16, n_embd=128,
                                n_head=4, n_ff=320, n_layer=3, eps=1e-5, scale_factor=2,
                                preproc_image_size=256)),
    # Pixtral-12B's text side (Mistral: a llama, with Pixtral's image tokens added to the
    # vocabulary) for the synthetic `pixtral` projector: images at their own size in 16-pixel
    # patches (8 to 1024 tokens), RMS norms, 2-D RoPE, SiLU-gated FFN, biases on mm.1/mm.2, the
    # [IMG_BREAK] row embedding.
    "pixtral": dict(arch="llama", n_embd=256, n_head=4, n_head_kv=2, head_dim=64, n_ff=512,
                    n_layer=2, rope_base=1000000.0, output=True,
                    extra_tokens=["[IMG]", "[IMG_BREAK]", "[IMG_END]"],
                    mmproj=dict(type="pixtral", image_size=1024, patch_size=16, n_embd=128,
                                n_head=4, n_ff=320, n_layer=3, eps=1e-5)),
    # Mistral Small 3.1's: the same with the 2x2 patch merger (mm.input_norm,
    # mm.patch_merger) and no projector biases.
    "mistral3": dict(arch="llama", n_embd=256, n_head=4, n_head_kv=2, head_dim=64, n_ff=512,
                     n_layer=2, rope_base=1000000.0, output=True,
                     extra_tokens=["[IMG]", "[IMG_BREAK]", "[IMG_END]"],
                     mmproj=dict(type="pixtral", image_size=1024, patch_size=16, n_embd=128,
                                 n_head=4, n_ff=320, n_layer=3, eps=1e-5, merge=2)),
    # Qwen2-VL's text side (qwen2 with M-RoPE: the head's 32 rotated pairs in sections of 8,
    # 12, 12 and 0 for time, height, width and extra, as the real 16/24/24/0 of 64; Q/K/V
    # biases; its image markers added to the vocabulary) for the synthetic `qwen2vl_merger`
    # projector: images at their own size in 14-pixel patches, 2x2 windows merged into one
    # token (8 to 4096 tokens), two patch kernels, LayerNorm ViT with 2-D RoPE, quick GELU.
    "qwen2vl": dict(arch="qwen2vl", n_embd=256, n_head=4, n_head_kv=2, head_dim=64, n_ff=512,
                    n_layer=2, rope_base=1000000.0, output=True, qkv_bias=True,
                    rope_sections=[8, 12, 12, 0],
                    extra_tokens=["<|vision_start|>", "<|vision_end|>"],
                    mmproj=dict(type="qwen2vl_merger", image_size=560, patch_size=14,
                                n_embd=128, n_head=4, n_ff=320, n_layer=3, eps=1e-6)),
    # Qwen2.5-VL's: the same text side, and the synthetic `qwen2.5vl_merger` projector: RMS
    # norms, a SiLU-gated FFN with biases, window attention (112-pixel windows, 4x4 tokens)
    # with every second block attending the whole image (`n_wa_pattern` 2, as the real 8).
    "qwen25vl": dict(arch="qwen2vl", n_embd=256, n_head=4, n_head_kv=2, head_dim=64, n_ff=512,
                     n_layer=2, rope_base=1000000.0, output=True, qkv_bias=True,
                     rope_sections=[8, 12, 12, 0],
                     extra_tokens=["<|vision_start|>", "<|vision_end|>"],
                     mmproj=dict(type="qwen2.5vl_merger", image_size=560, patch_size=14,
                                 n_embd=128, n_head=4, n_ff=320, n_layer=4, eps=1e-6,
                                 wa_pattern=2)),
    # Llama 4's image markers and chat tokens added to a llama (this engine does not build the
    # `llama4` text architecture: chunked attention, experts) for the synthetic `llama4`
    # projector: 112-pixel tiles of 14-pixel patches (8x8 patches and a class token), up to
    # 3x3 tiles and an overview, LayerNorm ViT with 2-D RoPE and GELU, pixel shuffle by 2 into
    # 16 tokens a tile, the adapter MLP (512 -> 256 -> 192) and the projection into 256.
    "llama4": dict(arch="llama", n_embd=256, n_head=4, n_head_kv=2, head_dim=64, n_ff=512,
                   n_layer=2, rope_base=500000.0, output=True,
                   extra_tokens=["<|image_start|>", "<|image_end|>", "<|header_start|>",
                                 "<|header_end|>", "<|eot|>"],
                   mmproj=dict(type="llama4", image_size=112, patch_size=14, n_embd=128,
                               n_head=4, n_ff=320, n_layer=3, eps=1e-5, scale_factor=2,
                               adapter=[256, 192])),
    # MiniCPM-V 2.6's text side (a qwen2 with Q/K/V biases, its image and slice markers added to
    # the vocabulary) for the synthetic `resampler` projector (clip.minicpmv_version 3): 112-pixel
    # inputs of 14-pixel patches, SigLIP with the 70x70 bucketed position table, a resampler of 16
    # queries in two heads of 128 (the text model's 256); images larger than 112 pixels sliced
    # into up to 9 cells plus the overview.
    "minicpmv": dict(arch="qwen2", n_embd=256, n_head=4, n_head_kv=2, head_dim=64, n_ff=512,
                     n_layer=2, rope_base=1000000.0, output=True, qkv_bias=True,
                     extra_tokens=["<image>", "</image>", "<slice>", "</slice>"],
                     mmproj=dict(type="resampler", image_size=112, patch_size=14, n_embd=128,
                                 n_head=4, n_ff=320, n_layer=3, eps=1e-6, version=3,
                                 query_num=16)),
    # MiniCPM-Llama3-V 2.5's: a llama text side with the same tokens, and the projector with
    # clip.minicpmv_version 2, whose slices mtmd writes inside one <slice> ... </slice>, each
    # between <image> and </image>.
    "minicpmv25": dict(arch="llama", n_embd=256, n_head=4, n_head_kv=2, head_dim=64, n_ff=512,
                       n_layer=2, rope_base=500000.0, output=True,
                       extra_tokens=["<image>", "</image>", "<slice>", "</slice>"],
                       mmproj=dict(type="resampler", image_size=112, patch_size=14, n_embd=128,
                                   n_head=4, n_ff=320, n_layer=3, eps=1e-6, version=2,
                                   query_num=16)),
    # BERT encoders (bge-small/MiniLM style: learned positions, token types, post-norms, GELU),
    # with their own small WordPiece vocabulary (BERT_WORDS; --vocab-from is not read): `bert`
    # an embedding model (mean pooling), `bert-rerank` a bge-reranker-style cross-encoder (rank
    # pooling through the `cls` dense + tanh and the one-output `cls.output` head).
    "bert": dict(arch="bert", n_embd=128, n_head=4, n_ff=256, n_layer=2, n_ctx_train=256,
                 pooling=1),
    "bert-rerank": dict(arch="bert", n_embd=128, n_head=4, n_ff=256, n_layer=2,
                        n_ctx_train=256, pooling=4),
}

# The synthetic BERT vocabulary: BERT's special tokens at their usual ids, whole words
# (`▁word`, as llama.cpp's converter spells a word-initial piece), continuation pieces (`##ing`
# spelled `ing`), punctuation, and single letters a-y at both places, so most words split into
# pieces; words with a q or a z (or other letters absent here) become [UNK].
BERT_WORDS = (
    "the a an is are was of to in on and or for with that this it be as by at from what where "
    "who how machine learning learn field study artificial intelligence statistical algorithm "
    "data physical system power force control movement process new understand knowledge skill "
    "paris capital france great city european giant panda bear species china hello world cafe "
    "river bank money fish water swim run good bad day night"
).split()
BERT_PIECES = ["ing", "ed", "s", "es", "er", "ly", "al", "tion", "ment", "ical", "ity", "ence"]
BERT_PUNCT = list(".,!?;:'\"()-/$%&*+=@#")


def bert_vocab():
    toks = ["[PAD]"] + [f"[unused{i}]" for i in range(99)] + ["[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    types = [3] + [5] * 99 + [2, 3, 3, 3]
    letters = [chr(c) for c in range(ord("a"), ord("z")) if chr(c) != "q"]
    words = ["\u2581" + x for x in BERT_WORDS + BERT_PUNCT + letters + list("0123456789")]
    words += ["\u2581\u6771", "\u2581\u4eac"]  # 東 京
    words = list(dict.fromkeys(words))
    toks += words + BERT_PIECES + [c for c in letters if c not in BERT_PIECES]
    types += [1] * (len(toks) - len(types))
    return toks, types


# Qwen3-Reranker's prompt, as llama.cpp's converter stores it (tokenizer.chat_template.rerank).
RERANK_TEMPLATE = (
    "<|im_start|>system\nJudge whether the Document meets the requirements based on the Query "
    "and the Instruct provided. Note that the answer can only be \"yes\" or \"no\".<|im_end|>\n"
    "<|im_start|>user\n<Instruct>: Given a web search query, retrieve relevant passages that "
    "answer the query\n<Query>: {query}\n<Document>: {document}<|im_end|>\n"
    "<|im_start|>assistant\n<think>\n\n</think>\n\n"
)


class SplitMix64:
    """Deterministic uniform numbers in [-1, 1), vectorised splitmix64."""

    def __init__(self, seed):
        self.state = np.uint64(seed)

    def uniform(self, n):
        golden = np.uint64(0x9E3779B97F4A7C15)
        idx = np.arange(1, n + 1, dtype=np.uint64)
        with np.errstate(over="ignore"):
            z = self.state + idx * golden
            self.state = self.state + np.uint64(n) * golden
            z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
            z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
            z = z ^ (z >> np.uint64(31))
        # top 24 bits -> exact float in [0, 1)
        u = (z >> np.uint64(40)).astype(np.float64) / float(1 << 24)
        return (2.0 * u - 1.0).astype(np.float32)


def quantize_q8_0(x):
    """ggml's Q8_0 reference quantizer: per 32 values, d = max|x| / 127 (stored f16),
    q = round(x / d) half away from zero."""
    rows, cols = x.shape
    blocks = x.reshape(rows, cols // 32, 32).astype(np.float32)
    amax = np.abs(blocks).max(axis=2, keepdims=True)
    d = amax / np.float32(127)
    inv = np.where(d != 0, np.float32(1) / np.where(d != 0, d, 1), 0).astype(np.float32)
    v = blocks * inv
    q = (np.sign(v) * np.floor(np.abs(v) + np.float32(0.5))).astype(np.int8)
    out = np.empty((rows, cols // 32, 34), dtype=np.uint8)
    out[:, :, 0:2] = d.astype(np.float16).view(np.uint8).reshape(rows, cols // 32, 2)
    out[:, :, 2:] = q.view(np.uint8)
    return out.reshape(rows, cols // 32 * 34)


def read_tokenizer(path):
    """The tokenizer.* metadata of a GGUF as (key, value, type, subtype) tuples."""
    r = gguf.GGUFReader(path)
    out = []
    for key, field in r.fields.items():
        if not key.startswith("tokenizer."):
            continue
        vtype = field.types[0]
        if vtype == gguf.GGUFValueType.ARRAY:
            sub = field.types[1]
            if sub == gguf.GGUFValueType.STRING:
                val = [bytes(field.parts[i]).decode("utf-8") for i in field.data]
            else:
                val = [field.parts[i][0].item() for i in field.data]
            out.append((key, val, vtype, sub))
        elif vtype == gguf.GGUFValueType.STRING:
            out.append((key, bytes(field.parts[field.data[0]]).decode("utf-8"), vtype, None))
        else:
            out.append((key, field.parts[field.data[0]][0].item(), vtype, None))
    return out


def limit_vocab(tok, n):
    """The tokenizer cut to its first `n` tokens, keeping the merges whose parts and result all
    remain; special-token ids must lie below `n`."""
    tokens = next(v for k, v, _, _ in tok if k == "tokenizer.ggml.tokens")[:n]
    kept = set(tokens)
    out = []
    def merge_kept(m):
        left, right = m.split(" ", 1)
        return left in kept and right in kept and left + right in kept

    for key, val, vtype, sub in tok:
        if key == "tokenizer.ggml.merges":
            val = [m for m in val if merge_kept(m)]
        elif vtype == gguf.GGUFValueType.ARRAY:
            val = val[:n]
        elif key.endswith("_token_id") and val >= n:
            sys.exit(f"synth-model: {key} = {val} is not among the first {n} tokens")
        out.append((key, val, vtype, sub))
    return out


def add_tokens(tok, extra):
    """The tokenizer with `extra` appended as user-defined tokens (type 4, which llama.cpp and
    this engine match as special text), as a model's added tokens are converted."""
    out = []
    for key, val, vtype, sub in tok:
        if key == "tokenizer.ggml.tokens":
            val = val + list(extra)
        elif key == "tokenizer.ggml.token_type":
            val = val + [4] * len(extra)
        elif key == "tokenizer.ggml.scores":
            val = val + [0.0] * len(extra)
        out.append((key, val, vtype, sub))
    return out


def build(family, wtype, out_path, vocab_path):
    p = FAMILIES[family]
    arch = p["arch"]
    tok = read_tokenizer(vocab_path)
    if p.get("vocab_limit"):
        tok = limit_vocab(tok, p["vocab_limit"])
    if p.get("extra_tokens"):
        tok = add_tokens(tok, p["extra_tokens"])
    n_vocab = len(next(v for k, v, _, _ in tok if k == "tokenizer.ggml.tokens"))
    e, nh, nkv, ff = p["n_embd"], p["n_head"], p["n_head_kv"], p["n_ff"]
    mla = p.get("mla")
    # Latent attention: the cache row (one KV head) is the latent and the shared rotated key.
    hd = mla["kv_lora"] + mla["rope"] if mla else p["head_dim"]
    q_dim, kv_dim = nh * hd, nkv * hd
    seed = sum(ord(c) * 131 ** i for i, c in enumerate(family)) & ((1 << 63) - 1)
    rng = SplitMix64(seed)

    tmp = f"{out_path}.tmp{os.getpid()}"
    w = gguf.GGUFWriter(tmp, arch)
    # (not the family name: llama.cpp adjusts some vocabularies by model name)
    w.add_name("tiny synthetic model")
    w.add_context_length(p.get("n_ctx_train", 2048))
    w.add_embedding_length(e)
    w.add_block_count(p["n_layer"])
    w.add_feed_forward_length(ff)
    w.add_head_count(nh)
    w.add_head_count_kv(nkv)
    w.add_rope_freq_base(p["rope_base"])
    w.add_layer_norm_rms_eps(1e-6)
    w.add_rope_dimension_count(mla["rope"] if mla else hd)
    if mla:
        # As convert_hf_to_gguf.py writes DeepSeek-V2/V3 today (the split attn_k_b/attn_v_b form).
        w.add_vocab_size(n_vocab)
        w.add_q_lora_rank(mla["q_lora"])
        w.add_kv_lora_rank(mla["kv_lora"])
        w.add_key_length(hd)
        w.add_value_length(mla["kv_lora"])
        w.add_key_length_mla(mla["nope"] + mla["rope"])
        w.add_value_length_mla(mla["v_head"])
        w.add_leading_dense_block_count(p["n_dense_lead"])
        w.add_expert_shared_count(p["n_shared"])
        w.add_expert_gating_func(gguf.ExpertGatingFuncType(p["gating"]))
        w.add_expert_weights_scale(p["weights_scale"])
        if p["weights_norm"]:
            w.add_expert_weights_norm(True)
        if p.get("groups"):
            w.add_expert_group_count(p["groups"][0])
            w.add_expert_group_used_count(p["groups"][1])
    if p.get("yarn"):
        y = p["yarn"]
        w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
        w.add_rope_scaling_factor(y["factor"])
        w.add_rope_scaling_orig_ctx_len(y["orig_ctx"])
        w.add_rope_scaling_yarn_log_mul(0.1 * y["mscale_all_dim"])
    if p.get("rope_sections"):
        w.add_rope_dimension_sections(p["rope_sections"])
    if p.get("key_length"):
        w.add_key_length(hd)
        w.add_value_length(hd)
    if arch == "gemma2":
        w.add_sliding_window(p["sliding_window"])
        w.add_attn_logit_softcapping(p["attn_softcap"])
        w.add_final_logit_softcapping(p["final_softcap"])
    if arch == "phi3":
        w.add_sliding_window(0)
        w.add_rope_scaling_orig_ctx_len(p["n_ctx_orig"])
        scale = p["n_ctx_train"] / p["n_ctx_orig"]
        w.add_rope_scaling_attn_factors(float(np.sqrt(1 + np.log(scale) / np.log(p["n_ctx_orig"]))))
    if p.get("n_expert"):
        w.add_expert_count(p["n_expert"])
        w.add_expert_used_count(p["n_expert_used"])
        if p.get("n_ff_exp"):
            w.add_expert_feed_forward_length(p["n_ff_exp"])
        if p.get("n_ff_shexp"):
            w.add_expert_shared_feed_forward_length(p["n_ff_shexp"])
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16 if wtype == "f16" else gguf.LlamaFileType.MOSTLY_Q8_0)
    for key, val, vtype, sub in tok:
        w.add_key_value(key, val, vtype, sub)
    if p.get("rerank"):
        w.add_pooling_type(gguf.PoolingType.RANK)
        w.add_classifier_output_labels(["yes", "no"])
        if p.get("rerank_template"):
            w.add_chat_template([{"name": "rerank", "template": RERANK_TEMPLATE}])

    def mat(name, rows, cols, amp):
        x = (rng.uniform(rows * cols) * np.float32(amp)).reshape(rows, cols)
        if wtype == "f16":
            w.add_tensor(name, x.astype(np.float16))
        else:
            w.add_tensor(name, quantize_q8_0(x), raw_dtype=gguf.GGMLQuantizationType.Q8_0)

    def experts(name, n_expert, rows, cols, amp):
        # numpy (n_expert, rows, cols) is GGUF [cols, rows, n_expert], as llama.cpp loads experts.
        x = (rng.uniform(n_expert * rows * cols) * np.float32(amp)).reshape(n_expert * rows, cols)
        if wtype == "f16":
            w.add_tensor(name, x.astype(np.float16).reshape(n_expert, rows, cols))
        else:
            q = quantize_q8_0(x)
            w.add_tensor(name, q.reshape(n_expert, rows, q.shape[1]),
                         raw_dtype=gguf.GGMLQuantizationType.Q8_0)

    def mat32(name, rows, cols, amp):
        w.add_tensor(name, (rng.uniform(rows * cols) * np.float32(amp)).reshape(rows, cols))

    def vec(name, n, center, amp):
        w.add_tensor(name, (np.float32(center) + rng.uniform(n) * np.float32(amp)).astype(np.float32))

    # Amplitudes: uniform(-a, a) has std a/sqrt(3); projections keep activations near unit scale
    # and the head gives logits a spread of a few units, so argmax is rarely a near-tie.
    proj = lambda fan_in: float(np.sqrt(3.0 / fan_in))  # noqa: E731
    mat("token_embd.weight", n_vocab, e, p.get("embd_amp", 1.0))
    for i in range(p["n_layer"]):
        b = f"blk.{i}."
        vec(b + "attn_norm.weight", e, 1.0, 0.2)
        if mla:
            qw = nh * (mla["nope"] + mla["rope"])
            lora = mla["kv_lora"]
            if mla["q_lora"]:
                mat(b + "attn_q_a.weight", mla["q_lora"], e, proj(e))
                vec(b + "attn_q_a_norm.weight", mla["q_lora"], 1.0, 0.2)
                mat(b + "attn_q_b.weight", qw, mla["q_lora"], proj(mla["q_lora"]))
            else:
                mat(b + "attn_q.weight", qw, e, proj(e))
            mat(b + "attn_kv_a_mqa.weight", lora + mla["rope"], e, proj(e))
            vec(b + "attn_kv_a_norm.weight", lora, 1.0, 0.2)
            # GGUF [nope, kv_lora, n_head] and [kv_lora, v_head, n_head], as llama.cpp loads them.
            experts(b + "attn_k_b.weight", nh, lora, mla["nope"], proj(mla["nope"]))
            experts(b + "attn_v_b.weight", nh, mla["v_head"], lora, proj(lora))
            mat(b + "attn_output.weight", e, nh * mla["v_head"], proj(nh * mla["v_head"]))
        elif p.get("fused"):
            mat(b + "attn_qkv.weight", q_dim + 2 * kv_dim, e, proj(e))
        else:
            mat(b + "attn_q.weight", q_dim, e, proj(e))
            mat(b + "attn_k.weight", kv_dim, e, proj(e))
            mat(b + "attn_v.weight", kv_dim, e, proj(e))
        if p.get("qkv_bias") and not mla:
            vec(b + "attn_q.bias", q_dim, 0.0, 0.1)
            vec(b + "attn_k.bias", kv_dim, 0.0, 0.1)
            vec(b + "attn_v.bias", kv_dim, 0.0, 0.1)
        if p.get("qk_norm"):
            vec(b + "attn_q_norm.weight", hd, 1.0, 0.2)
            vec(b + "attn_k_norm.weight", hd, 1.0, 0.2)
        if not mla:
            mat(b + "attn_output.weight", e, q_dim, proj(q_dim))
        if p.get("post_norms"):
            vec(b + "post_attention_norm.weight", e, 1.0, 0.2)
        vec(b + "ffn_norm.weight", e, 1.0, 0.2)
        if p.get("n_expert") and i >= p.get("n_dense_lead", 0):
            # Router logits a few units apart, so the top-k choice is rarely a near-tie.
            ne, fx = p["n_expert"], p.get("n_ff_exp", ff)
            mat32(b + "ffn_gate_inp.weight", ne, e, 2.0 * proj(e))
            if p.get("probs_bias"):
                vec(b + "exp_probs_b.bias", ne, 0.0, 0.3)
            experts(b + "ffn_gate_exps.weight", ne, fx, e, proj(e))
            experts(b + "ffn_up_exps.weight", ne, fx, e, proj(e))
            experts(b + "ffn_down_exps.weight", ne, e, fx, proj(fx))
            if p.get("n_ff_shexp") or p.get("n_shared"):
                sff = p["n_ff_shexp"] if p.get("n_ff_shexp") else fx * p["n_shared"]
                if not mla:  # DeepSeek's shared experts have no gate
                    vec(b + "ffn_gate_inp_shexp.weight", e, 0.0, proj(e))
                mat(b + "ffn_gate_shexp.weight", sff, e, proj(e))
                mat(b + "ffn_up_shexp.weight", sff, e, proj(e))
                mat(b + "ffn_down_shexp.weight", e, sff, proj(sff))
        elif p.get("fused"):
            mat(b + "ffn_up.weight", 2 * ff, e, proj(e))
            mat(b + "ffn_down.weight", e, ff, proj(ff))
        else:
            mat(b + "ffn_gate.weight", ff, e, proj(e))
            mat(b + "ffn_up.weight", ff, e, proj(e))
            mat(b + "ffn_down.weight", e, ff, proj(ff))
        if p.get("post_norms"):
            vec(b + "post_ffw_norm.weight", e, 1.0, 0.2)
    vec("output_norm.weight", e, 1.0, 0.2)
    if p.get("output"):
        mat("output.weight", n_vocab, e, 5.0 * proj(e))
    if p.get("rerank"):
        # The "yes" and "no" rows; scores spread over most of (0, 1).
        mat("cls.output.weight", 2, e, 2.0 * proj(e))
    if p.get("rope_freqs"):
        # llama3 scaling factors as the converter derives them (factor 8, low 1, high 4, original
        # context 64 so that all three regions occur at head_dim 64).
        inv = 1.0 / (p["rope_base"] ** (np.arange(0, hd, 2, dtype=np.float64) / hd))
        factor, lo, hi, old = 8.0, 1.0, 4.0, 64.0
        out = []
        for f in inv:
            wl = 2 * np.pi / f
            if wl < old / hi:
                out.append(1.0)
            elif wl > old / lo:
                out.append(factor)
            else:
                s = (old / wl - lo) / (hi - lo)
                out.append(1.0 / ((1 - s) / factor + s))
        w.add_tensor("rope_freqs.weight", np.array(out, dtype=np.float32))
    if p.get("longrope"):
        n = hd // 2
        vec("rope_factors_long.weight", n, 3.0, 2.0)
        vec("rope_factors_short.weight", n, 1.1, 0.1)

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    os.replace(tmp, out_path)


def build_bert(family, wtype, out_path):
    """A BERT encoder as llama.cpp's converter writes one (see FAMILIES["bert"])."""
    p = FAMILIES[family]
    toks, types = bert_vocab()
    e, nh, ff, n_ctx = p["n_embd"], p["n_head"], p["n_ff"], p["n_ctx_train"]
    seed = sum(ord(c) * 131 ** i for i, c in enumerate(family)) & ((1 << 63) - 1)
    rng = SplitMix64(seed)
    tmp = f"{out_path}.tmp{os.getpid()}"
    w = gguf.GGUFWriter(tmp, "bert")
    w.add_name("tiny synthetic model")
    w.add_context_length(n_ctx)
    w.add_embedding_length(e)
    w.add_block_count(p["n_layer"])
    w.add_feed_forward_length(ff)
    w.add_head_count(nh)
    w.add_layer_norm_eps(1e-12)
    w.add_causal_attention(False)
    w.add_pooling_type(gguf.PoolingType(p["pooling"]))
    w.add_token_type_count(2)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16 if wtype == "f16" else gguf.LlamaFileType.MOSTLY_Q8_0)
    w.add_tokenizer_model("bert")
    w.add_tokenizer_pre("default")
    w.add_token_list(toks)
    w.add_token_types(types)
    w.add_bos_token_id(101)
    w.add_sep_token_id(102)
    w.add_unk_token_id(100)
    w.add_pad_token_id(0)
    w.add_mask_token_id(103)

    def mat(name, rows, cols, amp):
        x = (rng.uniform(rows * cols) * np.float32(amp)).reshape(rows, cols)
        if wtype == "f16":
            w.add_tensor(name, x.astype(np.float16))
        else:
            w.add_tensor(name, quantize_q8_0(x), raw_dtype=gguf.GGMLQuantizationType.Q8_0)

    def vec(name, n, center, amp):
        w.add_tensor(name, (np.float32(center) + rng.uniform(n) * np.float32(amp)).astype(np.float32))

    proj = lambda fan_in: float(np.sqrt(3.0 / fan_in))  # noqa: E731
    mat("token_embd.weight", len(toks), e, 1.0)
    # f32, as the converter keeps it: llama.cpp adds its row 0 to f32 activations directly.
    w.add_tensor("token_types.weight", (rng.uniform(2 * e) * np.float32(0.5)).reshape(2, e))
    mat("position_embd.weight", n_ctx, e, 0.5)
    vec("token_embd_norm.weight", e, 1.0, 0.2)
    vec("token_embd_norm.bias", e, 0.0, 0.2)
    for i in range(p["n_layer"]):
        b = f"blk.{i}."
        for t in ["attn_q", "attn_k", "attn_v", "attn_output"]:
            mat(b + t + ".weight", e, e, proj(e))
            vec(b + t + ".bias", e, 0.0, 0.2)
        vec(b + "attn_output_norm.weight", e, 1.0, 0.2)
        vec(b + "attn_output_norm.bias", e, 0.0, 0.2)
        mat(b + "ffn_up.weight", ff, e, proj(e))
        vec(b + "ffn_up.bias", ff, 0.0, 0.2)
        mat(b + "ffn_down.weight", e, ff, proj(ff))
        vec(b + "ffn_down.bias", e, 0.0, 0.2)
        vec(b + "layer_output_norm.weight", e, 1.0, 0.2)
        vec(b + "layer_output_norm.bias", e, 0.0, 0.2)
    if p["pooling"] == 4:
        mat("cls.weight", e, e, proj(e))
        vec("cls.bias", e, 0.0, 0.2)
        mat("cls.output.weight", 1, e, 3.0 * proj(e))
        vec("cls.output.bias", 1, 0.0, 0.5)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    os.replace(tmp, out_path)


CLIP_MEAN = [0.48145466, 0.4578275, 0.40821073]
CLIP_STD = [0.26862954, 0.26130258, 0.27577711]


class ProjectorWriter:
    """FAMILY's synthetic mmproj GGUF (architecture `clip`) being written to OUT_PATH: the
    generator seeded by the family's name, the metadata every projector type carries (in this
    order: the projector type, then `type_keys` as (writer method, key, value), the tower's
    sizes with `clip.vision.projection_dim` = `projection_dim`, mean and deviation, `extra_keys`,
    the file type), and the tensor helpers: matrices f16 or Q8_0 (WTYPE) of amplitude
    1/sqrt(columns), vectors f32."""

    def __init__(self, family, wtype, out_path, ty, type_keys, projection_dim, mean_std,
                 extra_keys=()):
        v = FAMILIES[family]["mmproj"]
        seed = sum(ord(c) * 131 ** i for i, c in enumerate(family + "/mmproj")) & ((1 << 63) - 1)
        self.rng = SplitMix64(seed)
        self.wtype, self.out_path = wtype, out_path
        self.tmp = f"{out_path}.tmp{os.getpid()}"
        w = self.w = gguf.GGUFWriter(self.tmp, "clip")
        w.add_name("tiny synthetic projector")
        w.add_bool("clip.has_vision_encoder", True)
        w.add_bool("clip.has_text_encoder", False)
        w.add_string("clip.projector_type", ty)
        for add, key, val in type_keys:
            getattr(w, add)(key, val)
        w.add_uint32("clip.vision.image_size", v["image_size"])
        w.add_uint32("clip.vision.patch_size", v["patch_size"])
        w.add_uint32("clip.vision.embedding_length", v["n_embd"])
        w.add_uint32("clip.vision.feed_forward_length", v["n_ff"])
        w.add_uint32("clip.vision.projection_dim", projection_dim)
        w.add_uint32("clip.vision.attention.head_count", v["n_head"])
        w.add_float32("clip.vision.attention.layer_norm_epsilon", v["eps"])
        w.add_uint32("clip.vision.block_count", v["n_layer"])
        w.add_array("clip.vision.image_mean", mean_std[0])
        w.add_array("clip.vision.image_std", mean_std[1])
        for add, key, val in extra_keys:
            getattr(w, add)(key, val)
        w.add_file_type(gguf.LlamaFileType.MOSTLY_F16 if wtype == "f16" else gguf.LlamaFileType.MOSTLY_Q8_0)

    def values(self, n, amp, centre=0.0):
        return self.rng.uniform(n) * np.float32(amp) + np.float32(centre)

    def mat(self, name, rows, cols):
        x = self.values(rows * cols, 1.0 / np.sqrt(cols)).reshape(rows, cols)
        if self.wtype == "f16":
            self.w.add_tensor(name, x.astype(np.float16))
        else:
            self.w.add_tensor(name, quantize_q8_0(x), raw_dtype=gguf.GGMLQuantizationType.Q8_0)

    def vec(self, name, n, amp, centre=0.0):
        self.w.add_tensor(name, self.values(n, amp, centre))

    def tensor(self, name, data):
        self.w.add_tensor(name, data)

    def layernorm_blocks(self, e, ff, n_layer):
        """CLIP/SigLIP blocks: attention and a two-matrix FFN with biases everywhere, LayerNorms
        with weight and bias."""
        for il in range(n_layer):
            b = f"v.blk.{il}."
            for part in ("attn_q", "attn_k", "attn_v", "attn_out"):
                self.mat(b + part + ".weight", e, e)
                self.vec(b + part + ".bias", e, 0.1)
            for ln in ("ln1", "ln2"):
                self.vec(b + ln + ".weight", e, 0.2, 1.0)
                self.vec(b + ln + ".bias", e, 0.2)
            self.mat(b + "ffn_up.weight", ff, e)
            self.vec(b + "ffn_up.bias", ff, 0.1)
            self.mat(b + "ffn_down.weight", e, ff)
            self.vec(b + "ffn_down.bias", e, 0.1)

    def finish(self):
        self.w.write_header_to_file()
        self.w.write_kv_data_to_file()
        self.w.write_tensors_to_file()
        self.w.close()
        os.replace(self.tmp, self.out_path)


def build_mmproj(family, wtype, out_path):
    """FAMILY's vision projector as llama.cpp's clip loads it (an mmproj GGUF, architecture
    `clip`), with the tensor names, types and metadata its converter writes for the type:
    - `mlp` (LLaVA 1.5): CLIP ViT with a class token, pre-norm, biases everywhere, quick GELU;
      a two-layer MLP projection into the text model's width;
    - `gemma3`: SigLIP (patch bias, no class token, no pre-norm, post-norm, GELU), then the
      soft-embedding norm and the input projection (`n_embd x n_text`, always f16, as the
      converter forces it);
    - `idefics3` (SmolVLM): SigLIP as above, the pixel-shuffle factor and the longest side of
      the preprocessing in the metadata, and `mm.model.fc` (no bias).
    Matrices are f16 or Q8_0; vectors and positions f32; the patch kernel f16 for `mlp` and
    f32 for the SigLIP types (whose converters keep `.embeddings.` tensors in f32)."""
    p = FAMILIES[family]
    v = p.get("mmproj")
    if v is None:
        sys.exit(f"synth-model: family {family} has no projector (families with one: "
                 + ", ".join(f for f in FAMILIES if FAMILIES[f].get("mmproj")) + ")")
    ty = v["type"]
    if ty == "pixtral":
        build_pixtral_mmproj(family, wtype, out_path)
        return
    if ty in ("qwen2vl_merger", "qwen2.5vl_merger"):
        build_qwen2vl_mmproj(family, wtype, out_path)
        return
    if ty == "llama4":
        build_llama4_mmproj(family, wtype, out_path)
        return
    if ty == "resampler":
        build_minicpmv_mmproj(family, wtype, out_path)
        return
    siglip = ty in ("gemma3", "idefics3")
    e, ff, ps, size = v["n_embd"], v["n_ff"], v["patch_size"], v["image_size"]
    n_text = p["n_embd"]
    n_pos = (size // ps) ** 2 + (0 if siglip else 1)
    extra = []
    if v.get("scale_factor"):
        extra.append(("add_uint32", "clip.vision.projector.scale_factor", v["scale_factor"]))
    if v.get("preproc_image_size"):
        extra.append(("add_uint32", "clip.vision.preproc_image_size", v["preproc_image_size"]))
    mean_std = ([0.5] * 3, [0.5] * 3) if siglip else (CLIP_MEAN, CLIP_STD)
    f = ProjectorWriter(family, wtype, out_path, ty, [("add_bool", "clip.use_gelu", siglip)],
                        n_text, mean_std, extra)
    kernel = f.values(e * 3 * ps * ps, 1.0 / np.sqrt(3 * ps * ps)).reshape(e, 3, ps, ps)
    f.tensor("v.patch_embd.weight", kernel if siglip else kernel.astype(np.float16))
    if siglip:
        f.vec("v.patch_embd.bias", e, 0.1)
    else:
        f.vec("v.class_embd", e, 1.0)
    f.tensor("v.position_embd.weight", f.values(n_pos * e, 0.5).reshape(n_pos, e))
    if not siglip:
        f.vec("v.pre_ln.weight", e, 0.2, 1.0)
        f.vec("v.pre_ln.bias", e, 0.2)
    f.layernorm_blocks(e, ff, v["n_layer"])
    if siglip:
        f.vec("v.post_ln.weight", e, 0.2, 1.0)
        f.vec("v.post_ln.bias", e, 0.2)
    if ty == "mlp":
        f.mat("mm.0.weight", n_text, e)
        f.vec("mm.0.bias", n_text, 0.1)
        f.mat("mm.2.weight", n_text, n_text)
        f.vec("mm.2.bias", n_text, 0.1)
    elif ty == "gemma3":
        # Gemma's RMS norm scales by 1 + w; the converter stores 1 + w.
        f.vec("mm.soft_emb_norm.weight", e, 0.2, 1.0)
        x = f.values(e * n_text, 1.0 / np.sqrt(e)).reshape(e, n_text)
        f.tensor("mm.input_projection.weight", x.astype(np.float16))
    else:
        k = e * v["scale_factor"] ** 2
        f.mat("mm.model.fc.weight", n_text, k)
    f.finish()


def build_pixtral_mmproj(family, wtype, out_path):
    """FAMILY's `pixtral` projector as llama.cpp's converter writes Pixtral's (Mistral Small
    3.1's with `merge`): the patch convolution (f16, no bias), an RMS pre-norm, blocks of RMS
    norms (weights only), attention without biases and a SiLU-gated FFN, no learned positions;
    with `merge`, `mm.input_norm` and `mm.patch_merger` (and `clip.vision.spatial_merge_size`);
    `mm.1` and `mm.2` (with biases without `merge`), and `v.token_embd.img_break`, the text
    model's [IMG_BREAK] row (random here, in the text model's width)."""
    p = FAMILIES[family]
    v = p["mmproj"]
    e, ff, ps, size = v["n_embd"], v["n_ff"], v["patch_size"], v["image_size"]
    n_text, merge = p["n_embd"], v.get("merge")
    extra = [("add_uint32", "clip.vision.spatial_merge_size", merge)] if merge else []
    f = ProjectorWriter(family, wtype, out_path, "pixtral", [("add_bool", "clip.use_silu", True)],
                        n_text, (CLIP_MEAN, CLIP_STD), extra)
    kernel = f.values(e * 3 * ps * ps, 1.0 / np.sqrt(3 * ps * ps)).reshape(e, 3, ps, ps)
    f.tensor("v.patch_embd.weight", kernel.astype(np.float16))
    f.vec("v.pre_ln.weight", e, 0.2, 1.0)
    for il in range(v["n_layer"]):
        b = f"v.blk.{il}."
        for part in ("attn_q", "attn_k", "attn_v", "attn_out"):
            f.mat(b + part + ".weight", e, e)
        for ln in ("ln1", "ln2"):
            f.vec(b + ln + ".weight", e, 0.2, 1.0)
        f.mat(b + "ffn_gate.weight", ff, e)
        f.mat(b + "ffn_up.weight", ff, e)
        f.mat(b + "ffn_down.weight", e, ff)
    if merge:
        f.vec("mm.input_norm.weight", e, 0.2, 1.0)
        f.mat("mm.patch_merger.weight", e, e * merge * merge)
    f.mat("mm.1.weight", n_text, e)
    if not merge:
        f.vec("mm.1.bias", n_text, 0.1)
    f.mat("mm.2.weight", n_text, n_text)
    if not merge:
        f.vec("mm.2.bias", n_text, 0.1)
    f.vec("v.token_embd.img_break", n_text, 1.0)
    f.finish()


def build_qwen2vl_mmproj(family, wtype, out_path):
    """FAMILY's `qwen2vl_merger` projector as llama.cpp's converter writes Qwen2-VL's: the
    temporal patch kernel split into two frames (`v.patch_embd.weight` and `.weight.1`, f16, no
    bias), no learned positions or class token, LayerNorm blocks with biases everywhere, quick
    GELU (neither use_gelu nor use_silu), the merger's LayerNorm as `v.post_ln`, and `mm.0`
    (4·n_embd wide, the 2x2 window) and `mm.2` with biases. Qwen2.5-VL's (`qwen2.5vl_merger`)
    as its converter writes them: RMS norms (weights only, the merger's too), a gated FFN
    (`ffn_gate`, `ffn_up`, `ffn_down`, with biases) and `clip.use_silu`, and
    `clip.vision.n_wa_pattern` (every n-th block attends the whole image, the others within
    their window)."""
    p = FAMILIES[family]
    v = p["mmproj"]
    ty = v["type"]
    v25 = ty == "qwen2.5vl_merger"
    e, ff, ps, size = v["n_embd"], v["n_ff"], v["patch_size"], v["image_size"]
    n_text = p["n_embd"]
    type_keys = []
    if v25:
        type_keys = [("add_bool", "clip.use_silu", True),
                     ("add_uint32", "clip.vision.n_wa_pattern", v["wa_pattern"])]
    f = ProjectorWriter(family, wtype, out_path, ty, type_keys, n_text, (CLIP_MEAN, CLIP_STD))
    for suffix in ("", ".1"):
        kernel = f.values(e * 3 * ps * ps, 1.0 / np.sqrt(6 * ps * ps)).reshape(e, 3, ps, ps)
        f.tensor("v.patch_embd.weight" + suffix, kernel.astype(np.float16))
    for il in range(v["n_layer"]):
        b = f"v.blk.{il}."
        for part in ("attn_q", "attn_k", "attn_v", "attn_out"):
            f.mat(b + part + ".weight", e, e)
            f.vec(b + part + ".bias", e, 0.1)
        for ln in ("ln1", "ln2"):
            f.vec(b + ln + ".weight", e, 0.2, 1.0)
            if not v25:
                f.vec(b + ln + ".bias", e, 0.2)
        for part in ("ffn_gate", "ffn_up") if v25 else ("ffn_up",):
            f.mat(b + part + ".weight", ff, e)
            f.vec(b + part + ".bias", ff, 0.1)
        f.mat(b + "ffn_down.weight", e, ff)
        f.vec(b + "ffn_down.bias", e, 0.1)
    f.vec("v.post_ln.weight", e, 0.2, 1.0)
    if not v25:
        f.vec("v.post_ln.bias", e, 0.2)
    f.mat("mm.0.weight", 4 * e, 4 * e)
    f.vec("mm.0.bias", 4 * e, 0.1)
    f.mat("mm.2.weight", n_text, 4 * e)
    f.vec("mm.2.bias", n_text, 0.1)
    f.finish()


# LoRA adapters (`--lora NAME`), in llama.cpp's adapter GGUF form: for each adapted weight of
# n_out rows x n_in columns, `NAME.lora_a` (rank rows of n_in) and `NAME.lora_b` (n_out rows of
# rank), f16, with adapter.lora.alpha (0: the scale is not divided by the rank).
LORAS = {
    # Every matrix llama.cpp's build_lora_mm adapts in a llama block, and the output head.
    "all": dict(seed=101, rank=8, alpha=16.0,
                targets=["attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up",
                         "ffn_down", "output"]),
    # A second adapter on a few of them, of another rank and no alpha (for two at once).
    "some": dict(seed=202, rank=4, alpha=0.0, targets=["attn_q", "attn_v", "ffn_down"]),
}


def build_llama4_mmproj(family, wtype, out_path):
    """FAMILY's `llama4` projector as llama.cpp's converter writes Llama 4's: the patch
    embedding a linear layer over the unfolded patch (`v.patch_embd.weight`, 3·p·p wide; f16 in
    an f16 file and f32 otherwise, as the converter forces it), the class token, learned
    positions for the patches and the class token, LayerNorm pre- and post-norms, LayerNorm
    blocks with biases everywhere and GELU (`clip.use_gelu`), the pixel-shuffle factor
    (`clip.vision.projector.scale_factor`), the adapter MLP `mm.model.mlp.1` and `.2` and the
    projection `mm.model.fc`, without biases; CLIP's mean and deviation of 0.5."""
    p = FAMILIES[family]
    v = p["mmproj"]
    e, ff, ps, size = v["n_embd"], v["n_ff"], v["patch_size"], v["image_size"]
    n_text, s = p["n_embd"], v["scale_factor"]
    n_pos = (size // ps) ** 2 + 1
    f = ProjectorWriter(family, wtype, out_path, "llama4", [("add_bool", "clip.use_gelu", True)],
                        n_text, ([0.5] * 3, [0.5] * 3),
                        [("add_uint32", "clip.vision.projector.scale_factor", s)])
    kernel = f.values(e * 3 * ps * ps, 1.0 / np.sqrt(3 * ps * ps)).reshape(e, 3 * ps * ps)
    f.tensor("v.patch_embd.weight", kernel.astype(np.float16) if wtype == "f16" else kernel)
    f.vec("v.class_embd", e, 1.0)
    f.tensor("v.position_embd.weight", f.values(n_pos * e, 0.5).reshape(n_pos, e))
    f.vec("v.pre_ln.weight", e, 0.2, 1.0)
    f.vec("v.pre_ln.bias", e, 0.2)
    f.layernorm_blocks(e, ff, v["n_layer"])
    f.vec("v.post_ln.weight", e, 0.2, 1.0)
    f.vec("v.post_ln.bias", e, 0.2)
    n1, n2 = v["adapter"]
    f.mat("mm.model.mlp.1.weight", n1, e * s * s)
    f.mat("mm.model.mlp.2.weight", n2, n1)
    f.mat("mm.model.fc.weight", n_text, n2)
    f.finish()


def build_minicpmv_mmproj(family, wtype, out_path):
    """FAMILY's `resampler` projector as llama.cpp's MiniCPM-V converter writes it: the version
    and query count (`clip.minicpmv_version`, `clip.minicpmv_query_num`), SigLIP (the patch
    kernel always f16, a patch bias, the 70x70 position table, LayerNorm blocks with biases and
    GELU, a post-norm), and the resampler: the learned queries `resampler.query` (f32),
    `resampler.kv` (no bias), LayerNorms `ln_q`, `ln_kv`, `ln_post`, attention `q`, `k`, `v`,
    `out` with biases, `resampler.proj` (no bias) and the 70x70 sine-cosine table
    `resampler.pos_embed_k` (f32; llama.cpp loads it and computes positions instead). 2-D
    `.weight` tensors f16 or Q8_0 (the position table f16 either way), the rest f32."""
    p = FAMILIES[family]
    v = p["mmproj"]
    e, ff, ps, size = v["n_embd"], v["n_ff"], v["patch_size"], v["image_size"]
    d, nq, grid = p["n_embd"], v["query_num"], 70
    type_keys = [("add_bool", "clip.has_minicpmv_projector", True),
                 ("add_int32", "clip.minicpmv_version", v["version"]),
                 ("add_uint32", "clip.minicpmv_query_num", nq),
                 ("add_bool", "clip.use_gelu", True)]
    # projection_dim 0, as the converter writes it
    f = ProjectorWriter(family, wtype, out_path, "resampler", type_keys, 0, ([0.5] * 3, [0.5] * 3))
    kernel = f.values(e * 3 * ps * ps, 1.0 / np.sqrt(3 * ps * ps)).reshape(e, 3, ps, ps)
    f.tensor("v.patch_embd.weight", kernel.astype(np.float16))
    f.vec("v.patch_embd.bias", e, 0.1)
    pos = f.values(grid * grid * e, 0.5).reshape(grid * grid, e)
    f.tensor("v.position_embd.weight", pos.astype(np.float16))
    f.layernorm_blocks(e, ff, v["n_layer"])
    f.vec("v.post_ln.weight", e, 0.2, 1.0)
    f.vec("v.post_ln.bias", e, 0.2)
    f.tensor("resampler.query", f.values(nq * d, 1.0).reshape(nq, d))
    f.mat("resampler.kv.weight", d, e)
    for ln in ("q", "kv", "post"):
        f.vec(f"resampler.ln_{ln}.weight", d, 0.2, 1.0)
        f.vec(f"resampler.ln_{ln}.bias", d, 0.2)
    for part in ("q", "k", "v", "out"):
        f.mat(f"resampler.attn.{part}.weight", d, d)
        f.vec(f"resampler.attn.{part}.bias", d, 0.1)
    f.mat("resampler.proj.weight", d, d)
    # The converter's table: sin-cos of 70x70 positions (its values are not read).
    f.tensor("resampler.pos_embed_k", f.values(grid * grid * d, 1.0).reshape(grid * grid, d))
    f.finish()


def build_lora(name, family, out_path):
    """Writes LoRA adapter NAME (see LORAS) for FAMILY's model (a plain llama-style family:
    separate q/k/v and gate/up/down)."""
    spec, p = LORAS[name], FAMILIES[family]
    if p.get("fused") or p.get("mla") or p.get("n_expert"):
        sys.exit(f"synth-model: --lora writes adapters for llama-style families, not {family}")
    e, ff, r = p["n_embd"], p["n_ff"], spec["rank"]
    q_dim, kv_dim = p["n_head"] * p["head_dim"], p["n_head_kv"] * p["head_dim"]
    n_vocab = len(next(v for k, v, _, _ in read_tokenizer(SMOLLM2) if k == "tokenizer.ggml.tokens"))
    # (n_out, n_in) of each target
    shapes = {"attn_q": (q_dim, e), "attn_k": (kv_dim, e), "attn_v": (kv_dim, e),
              "attn_output": (e, q_dim), "ffn_gate": (ff, e), "ffn_up": (ff, e),
              "ffn_down": (e, ff), "output": (n_vocab, e)}
    rng = SplitMix64(spec["seed"])
    tmp = f"{out_path}.tmp{os.getpid()}"
    w = gguf.GGUFWriter(tmp, p["arch"])
    w.add_type("adapter")
    w.add_string("adapter.type", "lora")
    w.add_float32("adapter.lora.alpha", spec["alpha"])

    def pair(weight, n_out, n_in):
        # |A·x| about 1 for unit-scale x; B·(A·x) a few tenths, so the adapter moves logits.
        a = rng.uniform(r * n_in).reshape(r, n_in) * np.float32(np.sqrt(3.0 / n_in))
        b = rng.uniform(n_out * r).reshape(n_out, r) * np.float32(0.3)
        w.add_tensor(weight + ".lora_a", a.astype(np.float16))
        w.add_tensor(weight + ".lora_b", b.astype(np.float16))

    for t in spec["targets"]:
        if t == "output":
            continue
        for i in range(p["n_layer"]):
            pair(f"blk.{i}.{t}.weight", *shapes[t])
    if "output" in spec["targets"] and p.get("output"):
        pair("output.weight", *shapes["output"])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    os.replace(tmp, out_path)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("family", nargs="?", choices=sorted(FAMILIES))
    ap.add_argument("type", nargs="?", choices=["f16", "q8_0"])
    ap.add_argument("out", nargs="?")
    ap.add_argument("--vocab-from", default=SMOLLM2)
    ap.add_argument("--list", action="store_true", help="print the family names")
    ap.add_argument("--mmproj", action="store_true",
                    help="write FAMILY's vision projector (an mmproj GGUF) instead of its text model")
    ap.add_argument("--lora", choices=sorted(LORAS),
                    help="write the named LoRA adapter for FAMILY's model instead of the model")
    a = ap.parse_args()
    if a.list:
        print("\n".join(FAMILIES))
        return
    if not (a.family and a.type and a.out):
        ap.error("FAMILY TYPE OUT are required")
    if a.mmproj:
        build_mmproj(a.family, a.type, a.out)
        return
    if a.lora:
        if a.type != "f16":
            ap.error("--lora adapters are f16")
        build_lora(a.lora, a.family, a.out)
        return
    if FAMILIES[a.family]["arch"] == "bert":
        build_bert(a.family, a.type, a.out)
        return
    if not os.path.exists(a.vocab_from):
        sys.exit(f"synth-model: vocabulary source {a.vocab_from} not found "
                 "(packaging/fetch-models.sh smollm2)")
    build(a.family, a.type, a.out, a.vocab_from)


if __name__ == "__main__":
    main()
