//! llama.cpp flags about what is loaded beside the weights of `-m`: downloads (Hugging Face,
//! Docker, URLs, preset models), control vectors (LoRA adapters are `lora_flags`), metadata and
//! RoPE overrides, the multimodal flags that do not act (device choice, video). A flag that asks for
//! something not built is refused in one line naming it; a flag that only tunes it is accepted.
//! The embedding and infill flags that act are in `embedding_flags`, the multimodal ones
//! (`--mmproj`, `--image`) in `media_flags`.

use super::table::{equals, switch, valued, Check, Effect, Flag, Takes};

const DOWNLOADS: &str = "downloading models (pass a local file with -m)";
const NOTHING_DOWNLOADED: &str = "nothing is ever downloaded";
const ENCODER_DEVICE: &str =
    "the image encoder runs on the GPU the text model found (unless --no-mmproj-offload), else the CPU";
const NO_VIDEO: &str = "video and audio input are not built; images are encoded one at a time";
const SERVER_NORMALIZES: &str =
    "as in llama-server, a request's embd_normalize chooses the normalisation (default 2, Euclidean)";
const YARN: &str = "YaRN RoPE scaling";

fn minus_one(v: &str) -> bool {
    equals(v, -1.0)
}

fn one(v: &str) -> bool {
    equals(v, 1.0)
}

fn zero(v: &str) -> bool {
    equals(v, 0.0)
}

fn none(v: &str) -> bool {
    v == "none"
}

const fn preset(long: &'static [&'static str]) -> Flag {
    switch(
        long,
        &[],
        None,
        Effect::Refused("downloading preset models (pass a local file with -m)"),
    )
}

/// Model sources, adapters, overrides and multimodal flags.
pub const FLAGS: &[Flag] = &[
    switch(
        &["cache-list"],
        &["-cl"],
        None,
        Effect::Refused("a model download cache (models are never downloaded)"),
    ),
    valued(
        &["model-url"],
        &["-mu"],
        "MODEL_URL",
        Check::Text,
        Some("LLAMA_ARG_MODEL_URL"),
        Effect::Refused(DOWNLOADS),
    ),
    valued(
        &["docker-repo"],
        &["-dr"],
        "[REPO/]MODEL[:QUANT]",
        Check::Text,
        Some("LLAMA_ARG_DOCKER_REPO"),
        Effect::Refused(DOWNLOADS),
    ),
    valued(
        &["hf-repo"],
        &["-hf", "-hfr"],
        "USER/MODEL[:QUANT]",
        Check::Text,
        Some("LLAMA_ARG_HF_REPO"),
        Effect::Refused(DOWNLOADS),
    ),
    valued(
        &["hf-file"],
        &["-hff"],
        "FILE",
        Check::Text,
        Some("LLAMA_ARG_HF_FILE"),
        Effect::Refused(DOWNLOADS),
    ),
    valued(
        &["hf-token"],
        &["-hft"],
        "TOKEN",
        Check::Text,
        Some("HF_TOKEN"),
        Effect::NoOp(NOTHING_DOWNLOADED),
    ),
    switch(
        &["offline"],
        &[],
        Some("LLAMA_ARG_OFFLINE"),
        Effect::NoOp(NOTHING_DOWNLOADED),
    ),
    valued(
        &["spec-draft-hf", "hf-repo-draft"],
        &["-hfd", "-hfrd"],
        "USER/MODEL[:QUANT]",
        Check::Text,
        Some("LLAMA_ARG_SPEC_DRAFT_HF_REPO"),
        Effect::Refused(DOWNLOADS),
    ),
    preset(&["embd-gemma-default"]),
    preset(&["fim-qwen-1.5b-default"]),
    preset(&["fim-qwen-3b-default"]),
    preset(&["fim-qwen-7b-default"]),
    preset(&["fim-qwen-7b-spec"]),
    preset(&["fim-qwen-14b-spec"]),
    preset(&["fim-qwen-30b-default"]),
    preset(&["gpt-oss-20b-default"]),
    preset(&["gpt-oss-120b-default"]),
    preset(&["vision-gemma-4b-default"]),
    preset(&["vision-gemma-12b-default"]),
    switch(
        &["spec-default"],
        &[],
        None,
        Effect::Refused(
            "llama.cpp's preset speculative configuration (choose one with --spec-type)",
        ),
    ),
    valued(
        &["control-vector"],
        &[],
        "FNAME",
        Check::Text,
        None,
        Effect::Refused("control vectors"),
    ),
    valued(
        &["control-vector-scaled"],
        &[],
        "FNAME:SCALE,...",
        Check::Text,
        None,
        Effect::Refused("control vectors"),
    ),
    Flag {
        long: &["control-vector-layer-range"],
        short: &[],
        takes: Takes::Values("START END", 2),
        env: None,
        effect: Effect::Refused("control vectors"),
    },
    valued(
        &["override-kv"],
        &[],
        "KEY=TYPE:VALUE,...",
        Check::Text,
        None,
        Effect::Refused("overriding model metadata"),
    ),
    switch(
        &["check-tensors"],
        &[],
        None,
        Effect::Refused("scanning tensor data for invalid values"),
    ),
    valued(
        &["rope-scaling"],
        &[],
        "none|linear|yarn",
        Check::OneOf(&["none", "linear", "yarn"]),
        Some("LLAMA_ARG_ROPE_SCALING_TYPE"),
        Effect::NoOpIf(none, "none", "RoPE scaling"),
    ),
    valued(
        &["rope-scale"],
        &[],
        "N",
        Check::Float,
        Some("LLAMA_ARG_ROPE_SCALE"),
        Effect::NoOpIf(one, "1", "RoPE scaling"),
    ),
    valued(
        &["rope-freq-base"],
        &[],
        "N",
        Check::Float,
        Some("LLAMA_ARG_ROPE_FREQ_BASE"),
        Effect::Refused("overriding the model's RoPE base frequency"),
    ),
    valued(
        &["rope-freq-scale"],
        &[],
        "N",
        Check::Float,
        Some("LLAMA_ARG_ROPE_FREQ_SCALE"),
        Effect::NoOpIf(one, "1", "RoPE scaling"),
    ),
    valued(
        &["yarn-orig-ctx"],
        &[],
        "N",
        Check::Int,
        Some("LLAMA_ARG_YARN_ORIG_CTX"),
        Effect::NoOpIf(zero, "0 (the model's own)", YARN),
    ),
    valued(
        &["yarn-ext-factor"],
        &[],
        "N",
        Check::Float,
        Some("LLAMA_ARG_YARN_EXT_FACTOR"),
        Effect::NoOpIf(minus_one, "-1 (the model's own)", YARN),
    ),
    valued(
        &["yarn-attn-factor"],
        &[],
        "N",
        Check::Float,
        Some("LLAMA_ARG_YARN_ATTN_FACTOR"),
        Effect::NoOpIf(minus_one, "-1 (the model's own)", YARN),
    ),
    valued(
        &["yarn-beta-slow"],
        &[],
        "N",
        Check::Float,
        Some("LLAMA_ARG_YARN_BETA_SLOW"),
        Effect::NoOpIf(minus_one, "-1 (the model's own)", YARN),
    ),
    valued(
        &["yarn-beta-fast"],
        &[],
        "N",
        Check::Float,
        Some("LLAMA_ARG_YARN_BETA_FAST"),
        Effect::NoOpIf(minus_one, "-1 (the model's own)", YARN),
    ),
    // Multimodal.
    valued(
        &["mmproj-url"],
        &["-mmu"],
        "URL",
        Check::Text,
        Some("LLAMA_ARG_MMPROJ_URL"),
        Effect::Refused(DOWNLOADS),
    ),
    valued(
        &["mmproj-device"],
        &["-mmdev"],
        "DEVICE",
        Check::Text,
        Some("MTMD_BACKEND_DEVICE"),
        Effect::NoOp(ENCODER_DEVICE),
    ),
    valued(
        &["mtmd-batch-max-tokens"],
        &[],
        "N",
        Check::Int,
        Some("LLAMA_ARG_MTMD_BATCH_MAX_TOKENS"),
        Effect::NoOp(NO_VIDEO),
    ),
    valued(
        &["video-fps"],
        &[],
        "N",
        Check::Float,
        Some("LLAMA_ARG_VIDEO_FPS"),
        Effect::NoOp(NO_VIDEO),
    ),
    valued(
        &["video-timestamp-interval"],
        &[],
        "N",
        Check::Int,
        Some("LLAMA_ARG_VIDEO_TIMESTAMP_INTERVAL"),
        Effect::NoOp(NO_VIDEO),
    ),
    valued(
        &["video-ffmpeg-dir"],
        &[],
        "DIR",
        Check::Text,
        Some("LLAMA_ARG_VIDEO_FFMPEG_DIR"),
        Effect::NoOp(NO_VIDEO),
    ),
    valued(
        &["media-path"],
        &[],
        "PATH",
        Check::Text,
        None,
        Effect::NoOp("images come in requests as base64 data: URLs; file URLs are not read"),
    ),
    // Reranking, embeddings and infill: `embedding_flags`.
    valued(
        &["embd-normalize"],
        &[],
        "N",
        Check::Int,
        None,
        Effect::NoOp(SERVER_NORMALIZES),
    ),
];
