//! Slot save, restore and erase (`--slot-save-path`, `POST /slots/{id}?action=...`), written
//! from llama-server's README (llama.cpp 0c1e570) and checked on SmolLM2: the response shapes
//! (`id_slot`, `filename`, `n_saved`/`n_written`, `n_restored`/`n_read`, `n_erased`,
//! `timings`), a file saved by one server process restored by another whose next completion
//! reuses the cached prompt and gives the same greedy answer, an action on a busy slot waiting
//! for it as llama-server defers it, and each error as a 4xx naming the problem (the file name,
//! a missing or foreign file, a slot that does not exist, an unknown action, the flag not given).

use super::{get, SMOLLM2};
use crate::common;
use crate::common::http::{post, send, Reply};
use crate::common::server::{start_model, Server};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

const GEMMA: &str = "gemma-3-270m-q4_k_m";

/// A fresh empty directory for one test's slot files.
fn slot_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("llamafile-slots-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn start(model: &str, dir: &Path, args: &[&str]) -> Option<Server> {
    let mut all = vec!["--slot-save-path", dir.to_str().unwrap()];
    all.extend_from_slice(args);
    start_model(model, &all)
}

fn action(port: u16, slot: &str, action: &str, body: Value) -> Reply {
    post(port, &format!("/slots/{slot}?action={action}"), &body)
}

fn slot0_cached(port: u16) -> u64 {
    let s = get(port, "/slots").json();
    s[0]["n_cached_tokens"].as_u64().unwrap()
}

/// A 4xx whose error names `param` and whose message contains `needle`.
fn assert_error(r: &Reply, status: u16, param: &str, needle: &str) {
    assert_eq!(r.status, status, "{}", String::from_utf8_lossy(&r.body));
    let e = &r.json()["error"];
    if !param.is_empty() {
        assert_eq!(e["param"], param, "{e}");
    }
    assert!(
        e["message"].as_str().unwrap().contains(needle),
        "{needle:?} in {e}"
    );
}

const PROMPT: &str = "Write a short poem about the sea and the wind and the stars at night.";

fn complete(port: u16) -> Value {
    let r = post(
        port,
        "/completion",
        &json!({"prompt": PROMPT, "n_predict": 12, "temperature": 0, "cache_prompt": true}),
    );
    assert_eq!(r.status, 200);
    r.json()
}

#[test]
fn a_saved_slot_restores_in_a_later_process_and_its_prompt_stays_cached() {
    let dir = slot_dir("roundtrip");
    let Some(a) = start(SMOLLM2, &dir, &["-np", "1"]) else {
        return;
    };
    let first = complete(a.port);
    let n_prompt = first["tokens_evaluated"].as_u64().unwrap();
    let cached = slot0_cached(a.port);
    assert!(cached >= n_prompt);
    let r = action(a.port, "0", "save", json!({"filename": "poem.bin"}));
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let saved = r.json();
    assert_eq!(saved["id_slot"], 0);
    assert_eq!(saved["filename"], "poem.bin");
    assert_eq!(saved["n_saved"], cached);
    let size = std::fs::metadata(dir.join("poem.bin")).unwrap().len();
    assert_eq!(saved["n_written"], size);
    assert!(saved["timings"]["save_ms"].as_f64().unwrap() >= 0.0);
    // Written atomically: no temporary file is left beside it.
    let names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["poem.bin"]);
    drop(a);

    let b = start(SMOLLM2, &dir, &["-np", "1"]).unwrap();
    assert_eq!(slot0_cached(b.port), 0);
    let r = action(b.port, "0", "restore", json!({"filename": "poem.bin"}));
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let restored = r.json();
    assert_eq!(restored["id_slot"], 0);
    assert_eq!(restored["filename"], "poem.bin");
    assert_eq!(restored["n_restored"], cached);
    assert_eq!(restored["n_read"], size);
    assert!(restored["timings"]["restore_ms"].as_f64().unwrap() >= 0.0);
    assert_eq!(slot0_cached(b.port), cached);
    // The next completion finds its prompt cached and answers as the first process did.
    let second = complete(b.port);
    assert_eq!(second["timings"]["cache_n"], n_prompt - 1);
    assert_eq!(second["tokens_cached"], slot0_cached_before_erase(&second));
    assert_eq!(second["content"], first["content"]);

    let r = action(b.port, "0", "erase", json!({}));
    assert_eq!(r.status, 200);
    let erased = r.json();
    assert_eq!(
        erased,
        json!({"id_slot": 0, "n_erased": slot0_cached_before_erase(&second)})
    );
    assert_eq!(slot0_cached(b.port), 0);
    let third = complete(b.port);
    assert_eq!(third["timings"]["cache_n"], 0);
    assert_eq!(third["content"], first["content"]);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The tokens a slot holds after a `complete` answered `r`: its prompt and all generated tokens
/// but the last (which is sampled, never fed).
fn slot0_cached_before_erase(r: &Value) -> u64 {
    r["tokens_evaluated"].as_u64().unwrap() + r["tokens_predicted"].as_u64().unwrap() - 1
}

#[test]
fn an_action_on_a_busy_slot_waits_until_it_is_idle() {
    let dir = slot_dir("busy");
    let Some(srv) = start(SMOLLM2, &dir, &["-np", "1"]) else {
        return;
    };
    let port = srv.port;
    let long = std::thread::spawn(move || {
        let r = post(
            port,
            "/completion",
            &json!({"prompt": "Count:", "n_predict": 48, "temperature": 0, "ignore_eos": true}),
        );
        r.json()
    });
    let t0 = std::time::Instant::now();
    while !get(port, "/slots").json()[0]["is_processing"]
        .as_bool()
        .unwrap()
    {
        assert!(t0.elapsed().as_secs() < 30, "the request never started");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let r = action(port, "0", "save", json!({"filename": "busy.bin"}));
    let done = long.join().unwrap();
    assert_eq!(done["tokens_predicted"], 48);
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    // Saved after the request ended: its prompt and every generated token fed are in the file.
    assert_eq!(r.json()["n_saved"], slot0_cached_before_erase(&done));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn slot_action_errors_are_4xx_naming_the_problem() {
    let dir = slot_dir("errors");
    let Some(srv) = start(SMOLLM2, &dir, &["-np", "2"]) else {
        return;
    };
    let p = srv.port;
    for name in ["../escape.bin", "a/b.bin", "a\\b", "..", "x.", "", "a:b"] {
        let r = action(p, "0", "save", json!({"filename": name}));
        assert_error(&r, 400, "filename", "filename");
    }
    assert!(
        std::fs::read_dir(&dir).unwrap().next().is_none(),
        "nothing written"
    );
    assert_error(
        &action(p, "0", "save", json!({})),
        400,
        "filename",
        "required",
    );
    assert_error(
        &action(p, "0", "restore", json!({"filename": 5})),
        400,
        "filename",
        "string",
    );
    assert_error(
        &action(p, "0", "restore", json!({"filename": "missing.bin"})),
        400,
        "filename",
        "no such file",
    );
    std::fs::write(dir.join("junk.bin"), b"not a slot file at all").unwrap();
    assert_error(
        &action(p, "1", "restore", json!({"filename": "junk.bin"})),
        400,
        "filename",
        "not a slot file",
    );
    // A cut file: its state ends early.
    complete(p);
    assert_eq!(
        action(p, "0", "save", json!({"filename": "whole.bin"})).status,
        200
    );
    let bytes = std::fs::read(dir.join("whole.bin")).unwrap();
    std::fs::write(dir.join("cut.bin"), &bytes[..bytes.len() - 10]).unwrap();
    assert_error(
        &action(p, "0", "restore", json!({"filename": "cut.bin"})),
        400,
        "filename",
        "cut.bin",
    );
    // A failed restore leaves the slot empty, as llama-server clears it.
    assert_eq!(slot0_cached(p), 0);
    for slot in ["2", "-1", "x", "+1", "01x"] {
        assert_error(
            &action(p, slot, "erase", json!({})),
            400,
            "id_slot",
            "not a slot",
        );
    }
    assert_error(
        &action(p, "0", "delete", json!({})),
        400,
        "action",
        "save, restore, erase",
    );
    assert_error(&post(p, "/slots/0", &json!({})), 400, "action", "required");
    let r = send("127.0.0.1", p, "GET", "/slots/0?action=erase", &[], "");
    assert_eq!(r.status, 405);
    drop(srv);

    // A file saved from another model is refused.
    if let Some(gemma) = start(GEMMA, &dir, &["-np", "1"]) {
        assert_eq!(
            action(gemma.port, "0", "save", json!({"filename": "gemma.bin"})).status,
            200
        );
        drop(gemma);
        let srv = start(SMOLLM2, &dir, &["-np", "1"]).unwrap();
        assert_error(
            &action(srv.port, "0", "restore", json!({"filename": "gemma.bin"})),
            400,
            "filename",
            "another model",
        );
    }

    // Without --slot-save-path, slot actions are not supported.
    let srv = super::start(&[]).unwrap();
    let r = action(srv.port, "0", "save", json!({"filename": "x.bin"}));
    assert_eq!(r.status, 501);
    assert_eq!(r.json()["error"]["type"], "not_supported_error");
    assert!(r.json()["error"]["message"]
        .as_str()
        .unwrap()
        .contains("--slot-save-path"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn slot_save_path_must_be_a_directory() {
    let Some(model) = common::model_path(SMOLLM2) else {
        return;
    };
    let out = common::llamafile(&[
        "-m",
        model.to_str().unwrap(),
        "--server",
        "--slot-save-path",
        "/nonexistent/slots",
    ]);
    common::assert_one_line_error(&out, "--slot-save-path /nonexistent/slots: not a directory");
}
