//! Chat templates with hostile content. The input's first 0xFF-separated part is a template
//! source (a downloaded GGUF's template is untrusted), the rest are message contents with
//! alternating roles, rendered by that template and by one built-in format, chosen by the
//! input's length (rendering all nine took most of each input's time; over a run, each is
//! given a ninth of the inputs).
//!
//! The fuzzed template runs on a hundredth of the product's instruction budget: a template
//! that loops until the budget runs out (nested loops over the messages) takes the same paths,
//! the running out included, in a hundredth of the time (such inputs took 1 to 2.5 s each and
//! brought the target to 560 inputs a second once the corpus held them).
//!
//! A source containing `*` runs as the product runs a GGUF's template: in a child process (the
//! `llamafile` binary named by `LLAMAFILE_FUZZ_TEMPLATE_WORKER`, which tools/fuzz.sh builds),
//! stopped after a second; without that variable it is skipped. In-process it may never end:
//! minijinja repeats a list lazily, and iterating `[] * 555555555555` spins inside one
//! instruction, where the budget is never checked, in a rendering and in compiling too when
//! the operands are constants (`{{ () * 55555555550 ~ 'x' }}`: minijinja folds constant
//! expressions). Both were found by this target; tests/chat_isolation.rs keeps them.

#![no_main]

mod common;

use std::path::Path;
use std::sync::LazyLock;
use std::time::Duration;

use libfuzzer_sys::fuzz_target;
use llamafile::chat::{builtin, builtin_names, ChatTemplate, Message, RENDER_FUEL};

static BUILTIN: LazyLock<Vec<ChatTemplate>> = LazyLock::new(|| {
    builtin_names()
        .split(", ")
        .map(|name| {
            let src = builtin(name).expect("every listed built-in format has a source");
            ChatTemplate::in_process(src, "<s>", "</s>").expect("built-in templates compile")
        })
        .collect()
});

/// The executable that runs templates in child processes, when the environment names one.
static WORKER: LazyLock<Option<&'static Path>> = LazyLock::new(|| {
    let exe = std::env::var_os("LLAMAFILE_FUZZ_TEMPLATE_WORKER")?;
    Some(Box::leak(Path::new(&exe).to_path_buf().into_boxed_path()))
});

fuzz_target!(|data: &[u8]| {
    let parts = common::parts(data);
    let (source, contents) = parts.split_first().expect("split yields one part at least");
    let roles = ["system", "user", "assistant", "user"];
    let messages: Vec<Message> = contents
        .iter()
        .enumerate()
        .map(|(i, c)| Message::new(roles[i % roles.len()], c.clone()))
        .collect();
    let template = if !source.contains('*') {
        ChatTemplate::in_process(source, "<s>", "</s>").ok()
    } else if let Some(exe) = *WORKER {
        ChatTemplate::in_child(exe, source, "<s>", "</s>", Duration::from_secs(1)).ok()
    } else {
        None
    };
    if let Some(mut t) = template {
        t.set_fuel(RENDER_FUEL / 100);
        let _ = t.render(&messages, true);
    }
    let _ = BUILTIN[data.len() % BUILTIN.len()].render(&messages, true);
});
