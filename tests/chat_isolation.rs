//! Chat templates run in child processes that are stopped (src/chat/isolate.rs): the templates
//! that fuzzing found spinning inside one minijinja instruction, in a rendering and in
//! compiling, end with an error; one that fills memory is killed at its limit; a template run
//! in a child renders what it renders in-process; and the `llamafile` binary puts all of this
//! in front of a user as one error line (CLI), a 400 (server) or a ChatML fallback (a GGUF's own
//! template that cannot be compiled).

mod common;

use common::http::{post, Reply};
use common::server::{start_exe, start_with};
use common::{assert_one_line_error, llamafile_with_input, model_path};
use llamafile::chat::{ChatError, ChatTemplate, Message, CHATML};
use llamafile::gguf::{GgufFile, GgufWriter};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::time::Duration;

const SMOLLM: &str = "SmolLM2-135M-Instruct.Q4_1";

/// Iterating a lazily repeated empty list: one instruction that never ends (found by fuzzing).
const SPINS_RENDERING: &str = "{% for x in [] * 555555555555 %}{% endfor %}ok";

/// The same, folded as a constant while compiling (found by fuzzing).
const SPINS_COMPILING: &str = "{{ () * 55555555550 ~ 'x' }}";

/// A 100 MB string concatenated to 1.2 GB: a few instructions, well within the budget.
const FILLS_MEMORY: &str =
    "{% set s = 'x' * 100000000 %}{% set s = s ~ s ~ s ~ s %}{% set s = s ~ s ~ s %}{{ s|length }}";

/// The binary under test, which serves template jobs when started as a worker.
fn worker() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_llamafile"))
}

fn in_child(source: &str, deadline_s: u64) -> Result<ChatTemplate, ChatError> {
    ChatTemplate::in_child(
        worker(),
        source,
        "<s>",
        "</s>",
        Duration::from_secs(deadline_s),
    )
}

/// Asserts that `e` says the template's child was stopped, with `needle` in the reason.
fn assert_stopped(e: ChatError, needle: &str) {
    assert!(
        matches!(e, ChatError::Stopped(ref m) if m.contains(needle)),
        "{e}"
    );
}

/// The server's `/apply-template` for one user message.
fn apply_template(port: u16, content: &str) -> Reply {
    post(
        port,
        "/apply-template",
        &json!({"messages": [{"role": "user", "content": content}]}),
    )
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("llamafile-isolation-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

#[test]
fn a_child_renders_what_the_process_renders() {
    let sources = [
        CHATML,
        "{{ bos_token }}{% for m in messages %}{{ m.content.strip().upper() }}|{{ m.get('role') }}\n{% endfor %}{{ eos_token }}",
        "{% if messages[0].role != 'user' %}{{ raise_exception('first must be user') }}{% endif %}ok",
        "{% for i in range(1000) %}x{% endfor %}",
    ];
    let conversations = [
        vec![Message::new("user", "  hé \u{1F600} \"q\"  ")],
        vec![Message::new("assistant", "x"), Message::new("user", "y")],
        vec![],
    ];
    for source in sources {
        let here = ChatTemplate::in_process(source, "<s>", "</s>").unwrap();
        let there = in_child(source, 30).unwrap();
        assert!(there.is_isolated() && !here.is_isolated());
        for messages in &conversations {
            for add in [false, true] {
                let a = here.render(messages, add).map_err(|e| e.to_string());
                let b = there.render(messages, add).map_err(|e| e.to_string());
                assert_eq!(a, b, "{source} on {messages:?}");
            }
        }
    }
}

#[test]
fn a_child_reports_syntax_errors_and_the_budget() {
    assert!(matches!(
        in_child("{% for %}", 30),
        Err(ChatError::Syntax(_))
    ));
    let mut t = in_child("{% for i in range(1000) %}x{% endfor %}", 30).unwrap();
    t.set_fuel(500);
    let e = t.render(&[], false).unwrap_err();
    assert!(
        matches!(e, ChatError::Render(ref m) if m.contains("fuel")),
        "{e}"
    );
}

#[test]
fn a_template_that_spins_while_rendering_is_stopped() {
    let t = in_child(SPINS_RENDERING, 1).unwrap();
    let e = t.render(&[Message::new("user", "hi")], true).unwrap_err();
    assert_stopped(e, "longer than 1 s");
}

#[test]
fn a_template_that_spins_while_compiling_is_stopped() {
    let e = in_child(SPINS_COMPILING, 1).err().expect("stopped");
    assert_stopped(e, "longer than 1 s");
}

#[cfg(target_os = "linux")]
#[test]
fn a_template_that_fills_memory_is_killed_at_its_limit() {
    let t = in_child(FILLS_MEMORY, 30).unwrap();
    let e = t.render(&[], false).unwrap_err();
    assert_stopped(e, "signal");
}

#[test]
fn a_rendering_longer_than_the_cap_is_refused() {
    // 270 MB of text, past the 256 MiB a parent takes back.
    let t = in_child(
        "{% for i in range(3) %}{{ 'x' * 90000000 }}{% endfor %}",
        60,
    )
    .unwrap();
    let e = t.render(&[], false).unwrap_err();
    assert_stopped(e, "longer than 256 MiB");
}

#[cfg(target_os = "linux")]
#[test]
fn the_terminal_chat_says_the_template_was_stopped() {
    let Some(m) = model_path(SMOLLM) else { return };
    let file = scratch("fills-memory.jinja");
    std::fs::write(&file, FILLS_MEMORY).unwrap();
    let argv = [
        "-m",
        m.to_str().unwrap(),
        "--chat",
        "-n",
        "4",
        "--chat-template-file",
        file.to_str().unwrap(),
    ];
    let out = llamafile_with_input(&argv, b"hi\n");
    assert_one_line_error(&out, "the chat template was stopped");
}

#[cfg(target_os = "linux")]
#[test]
fn the_server_answers_400_for_a_template_stopped_on_some_messages() {
    let Some(m) = model_path(SMOLLM) else { return };
    let file = scratch("boom.jinja");
    let source = format!(
        "{{% for m in messages %}}{{% if m.content == 'boom' %}}{FILLS_MEMORY}{{% endif %}}<{{{{ m.role }}}}>{{{{ m.content }}}}{{% endfor %}}"
    );
    std::fs::write(&file, source).unwrap();
    let srv = start_with(&m, &["--chat-template-file", file.to_str().unwrap()]);
    let apply = |content: &str| apply_template(srv.port, content);
    let r = apply("boom");
    assert_eq!(r.status, 400, "{}", String::from_utf8_lossy(&r.body));
    let msg = r.json()["error"]["message"].as_str().unwrap().to_string();
    assert!(
        msg.contains("messages") && msg.contains("was stopped"),
        "{msg}"
    );
    // The server goes on serving, with the same template.
    let r = apply("fine");
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["prompt"], "<user>fine");
}

#[test]
fn a_model_whose_template_never_compiles_is_served_with_chatml() {
    let Some(m) = model_path(SMOLLM) else { return };
    let src = GgufFile::open(&m).unwrap();
    let mut w = GgufWriter::new();
    for (key, value) in src.metadata() {
        if key != "tokenizer.chat_template" {
            w.add_kv(key, value.clone());
        }
    }
    w.add_kv("tokenizer.chat_template", SPINS_COMPILING);
    for t in src.tensors() {
        w.add_tensor(&t.name, &t.dims, t.ty, src.tensor_data(t))
            .unwrap();
    }
    let hostile = scratch("hostile-template.gguf");
    w.write_file(&hostile).unwrap();
    // Starting takes the worker's deadline (10 s), then falls back with a warning.
    let srv = start_with(&hostile, &[]);
    let r = apply_template(srv.port, "hi");
    assert_eq!(
        r.json()["prompt"],
        "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    );
    let _ = std::fs::remove_file(hostile);
}

#[test]
fn the_worker_variable_set_by_hand_explains_itself() {
    let out = std::process::Command::new(worker())
        .env(llamafile::chat::isolate::WORKER_ENV, "1")
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert_one_line_error(&out, "is set, and stdin is not a template job");
}

/// The server goes on rendering after its executable was deleted (an upgrade in place): the
/// children start from `/proc/self/exe`, not from the path.
#[cfg(target_os = "linux")]
#[test]
fn templates_render_after_the_executable_is_deleted() {
    let Some(m) = model_path(SMOLLM) else { return };
    let copy = scratch("llamafile-copy");
    std::fs::copy(worker(), &copy).unwrap();
    let srv = start_exe(&copy, &m, &[], &[]);
    std::fs::remove_file(&copy).unwrap();
    let r = apply_template(srv.port, "hi");
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    assert!(r.json()["prompt"].as_str().unwrap().contains("hi"));
}
