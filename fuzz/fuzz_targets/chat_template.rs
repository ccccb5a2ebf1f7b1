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
//! A source containing `*` is skipped. minijinja repeats a list lazily, and iterating
//! `[] * 555555555555` spins inside one instruction, where the budget is never checked: it
//! never ends, in a rendering, and in compiling too when the operands are constants
//! (`{{ () * 55555555550 ~ 'x' }}`: minijinja folds constant expressions). Both found by this
//! target. A template is code that the budget bounds in instructions, not in the work one
//! instruction does; README (Limits under load) says what that means for a GGUF's template.

#![no_main]

mod common;

use std::sync::LazyLock;

use libfuzzer_sys::fuzz_target;
use llamafile::chat::{builtin, builtin_names, ChatTemplate, Message, RENDER_FUEL};

static BUILTIN: LazyLock<Vec<ChatTemplate>> = LazyLock::new(|| {
    builtin_names()
        .split(", ")
        .map(|name| {
            let src = builtin(name).expect("every listed built-in format has a source");
            ChatTemplate::new(src, "<s>", "</s>").expect("built-in templates compile")
        })
        .collect()
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
    if !source.contains('*') {
        if let Ok(mut t) = ChatTemplate::new(source, "<s>", "</s>") {
            t.set_fuel(RENDER_FUEL / 100);
            let _ = t.render(&messages, true);
        }
    }
    let _ = BUILTIN[data.len() % BUILTIN.len()].render(&messages, true);
});
