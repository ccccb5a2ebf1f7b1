//! `llama-server --help` as a contract: every flag and alias it lists is accepted by our parser
//! (it acts, does nothing for a stated reason, or refuses a feature not built in one line),
//! never "unexpected argument"; refused features exit non-zero naming the feature; the
//! `LLAMA_ARG_*` variables act like their flags, and the command line wins over them. The
//! flags are read from the help text itself (../shared/reference/llama-server/help.txt).

mod common;

use common::help::{llama_server_flags, with_value, HelpFlag};
use common::{assert_one_line_error, llamafile};
use llamafile::cli::{parse, CliError};
use std::ffi::OsString;
use std::process::Command;

fn argv(args: &[String]) -> Vec<OsString> {
    std::iter::once("llamafile".to_string())
        .chain(args.iter().cloned())
        .map(OsString::from)
        .collect()
}

/// Whether `msg` names one of the entry's spellings.
fn names_flag(f: &HelpFlag, msg: &str) -> bool {
    f.names
        .iter()
        .filter(|n| n.starts_with("--"))
        .any(|n| msg.contains(n.as_str()))
}

#[test]
fn the_help_text_is_read_whole() {
    let flags = llama_server_flags();
    let names: usize = flags.iter().map(|f| f.names.len()).sum();
    // 255 entries and 408 spellings in llama.cpp 0c1e570's help text.
    assert!(
        flags.len() >= 250 && names >= 400,
        "{} entries, {names} names",
        flags.len()
    );
    let threads = flags.iter().find(|f| f.long() == "--threads").unwrap();
    assert_eq!(threads.names, ["-t", "--threads"]);
    assert_eq!(threads.env.as_deref(), Some("LLAMA_ARG_THREADS"));
    assert_eq!(threads.default_value().as_deref(), Some("-1"));
    let kvo = flags.iter().find(|f| f.long() == "--kv-offload").unwrap();
    assert_eq!(
        kvo.names,
        ["-kvo", "--kv-offload", "-nkvo", "--no-kv-offload"]
    );
    assert!(!kvo.takes_value());
    let fa = flags.iter().find(|f| f.long() == "--flash-attn").unwrap();
    assert!(!fa.takes_value() && fa.default_value().as_deref() == Some("auto"));
    assert!(flags.iter().any(|f| f.long() == "--lora" && f.takes_file()));
}

#[test]
fn every_flag_and_alias_of_llama_server_is_accepted_or_refused_in_one_line() {
    let mut bad = Vec::new();
    let mut refused = 0;
    let mut accepted = 0;
    for f in llama_server_flags() {
        for name in &f.names {
            let args = with_value(&f, name);
            match parse(argv(&args)) {
                Ok(_) | Err(CliError::Info(_)) => accepted += 1,
                Err(CliError::Usage(msg)) => {
                    refused += 1;
                    if msg.contains("unexpected argument")
                        || msg.contains('\n')
                        || !names_flag(&f, &msg)
                    {
                        bad.push(format!("{}: {msg}", args.join(" ")));
                    }
                }
            }
        }
    }
    assert!(bad.is_empty(), "not accepted:\n{}", bad.join("\n"));
    // Refusals are the exception: features not built.
    assert!(
        accepted > 3 * refused,
        "{accepted} accepted, {refused} refused"
    );
}

#[test]
fn refused_features_exit_non_zero_in_one_line_naming_the_feature() {
    for (args, needle) in [
        (
            &["--mmproj-url", "http://x/p.gguf"][..],
            "--mmproj-url: this build does not support downloading models",
        ),
        (
            &["--audio", "a.wav"],
            "--audio a.wav: audio input is not built",
        ),
        (
            &["-hf", "user/model"],
            "--hf-repo: this build does not support downloading models",
        ),
        (
            &["--ssl-key-file", "k.pem"],
            "this build does not support HTTPS",
        ),
        (
            &["--models-dir", "models"],
            "this build does not support the multi-model router",
        ),
        (
            &["--control-vector-layer-range", "0", "1"],
            "control vectors",
        ),
        (&["--host", "/tmp/llama.sock", "-m", "x.gguf"], ""),
    ] {
        let out = llamafile(args);
        if needle.is_empty() {
            // Needs a model before the address is looked at: the model error comes first.
            assert!(!out.status.success());
            continue;
        }
        assert_one_line_error(&out, needle);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
    }
}

#[test]
fn values_are_checked_where_llama_server_checks_them() {
    for (args, needle) in [
        (&["--cpu-strict", "2"][..], "--cpu-strict"),
        (&["-sm", "diagonal"], "--split-mode"),
        (&["--numa", "everywhere"], "--numa"),
        (&["-ctk", "q9_9"], "--cache-type-k"),
        (
            &["-ctv", "q8_0", "-fa", "off"],
            "quantized V cache requires flash_attn",
        ),
        (
            &["--reasoning-budget", "-2"],
            "--reasoning-budget -2: expected -1",
        ),
        (&["-ngl", "many"], "--n-gpu-layers"),
        (&["--reasoning-format", "verbose"], "--reasoning-format"),
        (&["-lm", "fast"], "--load-mode"),
        (&["-C", "0xfg"], "--cpu-mask"),
        (&["--api-prefix", "llama/"], "--api-prefix"),
        (&["--kv-unified-per-slot", "4"], "--kv-unified-per-slot"),
    ] {
        assert_one_line_error(&llamafile(args), needle);
    }
}

/// Runs the binary with no model and `env` set: what it says on stderr.
fn run_env(args: &[&str], env: &[(&str, &str)]) -> (bool, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_llamafile"));
    cmd.args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn variables_act_like_flags_and_the_command_line_wins() {
    // A refused feature asked for by its variable is refused, naming the variable; switched
    // off by it, nothing is refused.
    let (ok, err) = run_env(&[], &[("LLAMA_ARG_AGENT", "1")]);
    assert!(
        !ok && err.contains("--agent (from LLAMA_ARG_AGENT)"),
        "{err}"
    );
    let (_, err) = run_env(&[], &[("LLAMA_ARG_AGENT", "false")]);
    assert!(err.contains("no model given"), "{err}");
    // An acting switch reads its variable the same way.
    let (_, err) = run_env(&[], &[("LLAMA_ARG_EMBEDDINGS", "1")]);
    assert!(err.contains("no model given"), "{err}");
    let (_, err) = run_env(&[], &[("LLAMA_ARG_EMBEDDINGS", "maybe")]);
    assert!(err.contains("LLAMA_ARG_EMBEDDINGS=maybe"), "{err}");
    let (_, err) = run_env(&[], &[("LLAMA_ARG_POOLING", "max")]);
    assert!(err.contains("--pooling"), "{err}");
    let (_, err) = run_env(&[], &[("LLAMA_ARG_RERANKING", "maybe")]);
    assert!(err.contains("LLAMA_ARG_RERANKING=maybe"), "{err}");
    // Values from variables are checked like values on the command line.
    let (_, err) = run_env(&[], &[("LLAMA_ARG_SPLIT_MODE", "diagonal")]);
    assert!(err.contains("--split-mode"), "{err}");
    let (_, err) = run_env(&[], &[("LLAMA_ARG_UI", "maybe")]);
    assert!(err.contains("LLAMA_ARG_UI=maybe"), "{err}");
    // The command line wins: a refused value from a variable is overridden by an accepted one.
    let (_, err) = run_env(&["--rope-scale", "1"], &[("LLAMA_ARG_ROPE_SCALE", "4")]);
    assert!(err.contains("no model given"), "{err}");
    let (_, err) = run_env(&[], &[("LLAMA_ARG_ROPE_SCALE", "4")]);
    assert!(err.contains("--rope-scale 4"), "{err}");
    // A switch pair: the variable turns the default off, the command line turns it back on.
    let (_, err) = run_env(&["--agent"], &[("LLAMA_ARG_AGENT", "0")]);
    assert!(err.contains("--agent:"), "{err}");
}
