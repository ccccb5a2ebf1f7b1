//! Mixture-of-experts files that ask for math this engine does not do, or lack what it needs,
//! are refused in one line naming the key, tensor or architecture, with a non-zero exit and no
//! panic: missing expert metadata, a gating function other than the family's, expert-weight
//! normalisation or scaling other than the family's, expert groups llama.cpp would reject, a
//! missing expert tensor, DeepSeek-V2 files in the older unsplit `attn_kv_b` layout or with a
//! gating function not built, and MoE architectures that are not built (Llama 4).

mod common;

use common::{assert_one_line_error, llamafile};
use llamafile::gguf::{GgufWriter, Value};
use llamafile::quant::GgmlType;
use std::path::PathBuf;
use std::process::Output;

/// A tiny F32 MoE model of architecture `arch` (4 experts of width 16, 2 used, unless `kv` says
/// otherwise; QK-norm tensors for qwen3moe),
/// without `skip` and with the extra metadata `ARCH.KEY = VALUE` of `kv` (replacing defaults).
fn tiny_moe(arch: &str, skip: &str, kv: &[(&str, Value)]) -> Vec<u8> {
    let (e, ff, ne, vocab) = (32u64, 16u64, 4u64, 8u64);
    let mut w = GgufWriter::new();
    w.add_kv("general.architecture", arch);
    let mut meta: Vec<(&str, Value)> = vec![
        ("embedding_length", (e as u32).into()),
        ("block_count", 1u32.into()),
        ("attention.head_count", 2u32.into()),
        ("attention.head_count_kv", 1u32.into()),
        ("feed_forward_length", (ff as u32).into()),
        ("vocab_size", (vocab as u32).into()),
        ("expert_count", (ne as u32).into()),
        ("expert_used_count", 2u32.into()),
    ];
    for (k, v) in kv {
        meta.retain(|(m, _)| m != k);
        meta.push((k, v.clone()));
    }
    for (k, v) in meta {
        if k != skip {
            w.add_kv(format!("{arch}.{k}"), v);
        }
    }
    let tensors: Vec<(&str, Vec<u64>)> = vec![
        ("token_embd.weight", vec![e, vocab]),
        ("blk.0.attn_norm.weight", vec![e]),
        ("blk.0.attn_q.weight", vec![e, e]),
        ("blk.0.attn_k.weight", vec![e, e / 2]),
        ("blk.0.attn_v.weight", vec![e, e / 2]),
        ("blk.0.attn_output.weight", vec![e, e]),
        ("blk.0.ffn_norm.weight", vec![e]),
        ("blk.0.ffn_gate_inp.weight", vec![e, ne]),
        ("blk.0.ffn_gate_exps.weight", vec![e, ff, ne]),
        ("blk.0.ffn_up_exps.weight", vec![e, ff, ne]),
        ("blk.0.ffn_down_exps.weight", vec![ff, e, ne]),
        ("output_norm.weight", vec![e]),
    ];
    let qk_norm: Vec<(&str, Vec<u64>)> = vec![
        ("blk.0.attn_q_norm.weight", vec![e / 2]),
        ("blk.0.attn_k_norm.weight", vec![e / 2]),
    ];
    let tensors = tensors
        .into_iter()
        .chain(qk_norm.into_iter().filter(|_| arch == "qwen3moe"));
    for (name, dims) in tensors {
        if name == skip {
            continue;
        }
        let n: u64 = dims.iter().product();
        w.add_tensor(name, &dims, GgmlType::F32, vec![0u8; n as usize * 4])
            .unwrap();
    }
    w.to_bytes().unwrap()
}

fn run(name: &str, bytes: &[u8]) -> Output {
    let dir = std::env::temp_dir().join(format!("llamafile-moe-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path: PathBuf = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    llamafile(&["-m", path.to_str().unwrap(), "-p", "hi", "-n", "1"])
}

#[test]
fn a_well_formed_moe_file_gets_past_the_model_checks() {
    // The control for the refusals below: the same file, complete, fails only for want of a
    // tokenizer.
    let width = [("expert_feed_forward_length", Value::from(16u32))];
    for arch in ["llama", "qwen3moe"] {
        let out = run(&format!("ok-{arch}.gguf"), &tiny_moe(arch, "", &width));
        assert_one_line_error(&out, "tokenizer");
    }
}

#[test]
fn missing_expert_metadata() {
    let out = run("no-count.gguf", &tiny_moe("qwen3moe", "expert_count", &[]));
    assert_one_line_error(&out, "missing metadata key 'qwen3moe.expert_count'");
    let out = run("no-used.gguf", &tiny_moe("llama", "expert_used_count", &[]));
    assert_one_line_error(&out, "missing metadata key 'llama.expert_used_count'");
    let too_many = [("expert_used_count", Value::from(5u32))];
    let out = run("too-many.gguf", &tiny_moe("llama", "", &too_many));
    assert_one_line_error(&out, "llama.expert_used_count");
}

#[test]
fn gating_function_not_implemented() {
    let sigmoid = [("expert_gating_func", Value::from(2u32))];
    let out = run("sigmoid.gguf", &tiny_moe("qwen3moe", "", &sigmoid));
    assert_one_line_error(&out, "qwen3moe.expert_gating_func");
    assert_one_line_error(&out, "sigmoid");
    let unknown = [("expert_gating_func", Value::from(9u32))];
    let out = run("gating-9.gguf", &tiny_moe("llama", "", &unknown));
    assert_one_line_error(&out, "unknown gating function 9");
}

#[test]
fn expert_weighting_other_than_the_familys() {
    let no_norm = [("expert_weights_norm", Value::from(false))];
    let out = run("no-norm.gguf", &tiny_moe("qwen3moe", "", &no_norm));
    assert_one_line_error(&out, "qwen3moe.expert_weights_norm");
    let norm = [("expert_weights_norm", Value::from(true))];
    let out = run("norm.gguf", &tiny_moe("qwen2moe", "", &norm));
    assert_one_line_error(&out, "qwen2moe.expert_weights_norm");
    let scale = [("expert_weights_scale", Value::from(2.5f32))];
    let out = run("scale.gguf", &tiny_moe("llama", "", &scale));
    assert_one_line_error(&out, "llama.expert_weights_scale");
}

#[test]
fn expert_groups_llama_cpp_would_reject() {
    // Group-limited routing is built for every family (llama.cpp applies it to all): a file
    // with valid groups gets past the model checks.
    let groups = [
        ("expert_group_count", Value::from(2u32)),
        ("expert_group_used_count", Value::from(1u32)),
    ];
    let out = run("groups.gguf", &tiny_moe("llama", "", &groups));
    assert_one_line_error(&out, "tokenizer");
    let uneven = [
        ("expert_group_count", Value::from(3u32)),
        ("expert_group_used_count", Value::from(1u32)),
    ];
    let out = run("groups-3.gguf", &tiny_moe("llama", "", &uneven));
    assert_one_line_error(&out, "llama.expert_group_count");
    let no_used = [("expert_group_count", Value::from(2u32))];
    let out = run("groups-unused.gguf", &tiny_moe("llama", "", &no_used));
    assert_one_line_error(&out, "llama.expert_group_used_count");
}

#[test]
fn missing_expert_tensor() {
    let out = run(
        "no-up.gguf",
        &tiny_moe("llama", "blk.0.ffn_up_exps.weight", &[]),
    );
    assert_one_line_error(&out, "blk.0.ffn_up_exps.weight");
    let out = run(
        "no-shexp.gguf",
        &tiny_moe(
            "qwen2moe",
            "",
            &[("expert_feed_forward_length", 16u32.into())],
        ),
    );
    assert_one_line_error(&out, "blk.0.ffn_gate_inp_shexp.weight");
}

#[test]
fn moe_architectures_not_built() {
    let out = run("llama4.gguf", &tiny_moe("llama4", "", &[]));
    assert_one_line_error(&out, "'llama4' is not built");
    assert_one_line_error(&out, "chunked attention");
}

/// DeepSeek-V2 metadata for [`tiny_moe`]: latent attention of rank 32 (head width 32 + 16),
/// in today's split layout unless `kv` replaces keys.
fn deepseek_kv(kv: &[(&'static str, Value)]) -> Vec<(&'static str, Value)> {
    let mut all: Vec<(&str, Value)> = vec![
        ("attention.q_lora_rank", 0u32.into()),
        ("attention.kv_lora_rank", 32u32.into()),
        ("attention.key_length", 48u32.into()),
        ("attention.value_length", 32u32.into()),
        ("attention.key_length_mla", 48u32.into()),
        ("attention.value_length_mla", 16u32.into()),
        ("rope.dimension_count", 16u32.into()),
        ("expert_feed_forward_length", 16u32.into()),
        ("expert_shared_count", 1u32.into()),
    ];
    for (k, v) in kv {
        all.retain(|(m, _)| m != k);
        all.push((k, v.clone()));
    }
    all
}

#[test]
fn deepseek2_layouts_and_gating_not_built() {
    // The older layout (one attn_kv_b, no key_length_mla): refused, naming it.
    let old = deepseek_kv(&[("attention.key_length_mla", 0u32.into())]);
    let out = run("deepseek2-old.gguf", &tiny_moe("deepseek2", "", &old));
    assert_one_line_error(&out, "deepseek2.attention.key_length_mla");
    assert_one_line_error(&out, "attn_kv_b");
    let softplus = deepseek_kv(&[("expert_gating_func", 4u32.into())]);
    let out = run(
        "deepseek2-softplus.gguf",
        &tiny_moe("deepseek2", "", &softplus),
    );
    assert_one_line_error(&out, "sqrt-softplus");
    // A deepseek2 file without its latent-attention tensors: the first one missing is named.
    let out = run(
        "deepseek2-no-mla.gguf",
        &tiny_moe("deepseek2", "", &deepseek_kv(&[])),
    );
    assert_one_line_error(&out, "blk.0.attn_q.weight");
}
