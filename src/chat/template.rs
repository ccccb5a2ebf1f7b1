//! Chat templates: the GGUF's Jinja source compiled with minijinja, extended with the Python
//! string and dict methods (`.strip()`, `.items()`, ...) that Hugging Face templates call, and the
//! `raise_exception` / `strftime_now` helpers that `transformers` provides.

use super::caps::TemplateCaps;
use super::isolate::{self, Job, RenderArgs};
use super::message::Message;
use super::pyjson;
use crate::gguf::GgufFile;
use crate::tokenizer::Tokenizer;
use minijinja::value::ValueKind;
use minijinja::{Environment, ErrorKind, Value};
use serde::{Deserialize, Serialize};
use std::borrow::Cow;
use std::path::Path;
use std::time::Duration;

/// llama.cpp's fallback when a model carries no template.
pub const CHATML: &str = "{%- for message in messages -%}\
{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' -}}\
{%- endfor -%}\
{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}";

/// Why a conversation could not be rendered.
#[derive(Debug, thiserror::Error)]
pub enum ChatError {
    #[error("the chat template does not compile: {0}")]
    Syntax(String),
    /// The template itself refused the conversation (`raise_exception`), or failed while running.
    #[error("the chat template rejected the messages: {0}")]
    Render(String),
    /// The template ran in a child process that was stopped (see `isolate`).
    #[error("the chat template was stopped: {0}")]
    Stopped(String),
    /// The child process for the template could not be run.
    #[error("the chat template could not be run: {0}")]
    Worker(String),
}

/// The most template instructions one rendering may run: far beyond any real conversation
/// (a few dozen per message), and a second or so of work for a template that loops on purpose.
pub const RENDER_FUEL: u64 = 20_000_000;

/// What a chat template is made of: its source, the special-token texts it sees, and the
/// instruction budget of each rendering. Sent whole to a worker (see `isolate`).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(super) struct TemplateSpec {
    pub source: String,
    pub bos_token: String,
    pub eos_token: String,
    pub fuel: u64,
}

impl TemplateSpec {
    fn new(source: &str, bos_token: &str, eos_token: &str) -> TemplateSpec {
        TemplateSpec {
            source: source.to_string(),
            bos_token: bos_token.to_string(),
            eos_token: eos_token.to_string(),
            fuel: RENDER_FUEL,
        }
    }
}

/// A compiled chat template with the special-token texts it may refer to.
pub struct ChatTemplate {
    engine: Engine,
    spec: TemplateSpec,
    /// Whether the template thinks when `enable_thinking` is true ([`ChatTemplate::thinks`]).
    thinks: std::sync::OnceLock<bool>,
    /// What the template can take ([`ChatTemplate::caps`]).
    caps: std::sync::OnceLock<TemplateCaps>,
}

/// Where a template runs.
enum Engine {
    /// Here, compiled once.
    InProcess(Box<Environment<'static>>),
    /// In a child process started from this executable for each rendering (compiled there each
    /// time: a small cost beside starting the process).
    Isolated {
        exe: &'static Path,
        deadline: Duration,
    },
}

impl ChatTemplate {
    /// Compiles `source`; `bos_token` and `eos_token` are the texts the template sees. Once
    /// `isolate::enable` has named an executable, the template is compiled and rendered in
    /// child processes that are stopped past a deadline (a GGUF's template is untrusted code).
    pub fn new(source: &str, bos_token: &str, eos_token: &str) -> Result<ChatTemplate, ChatError> {
        let spec = TemplateSpec::new(source, bos_token, eos_token);
        match isolate::worker_exe() {
            Some(exe) => ChatTemplate::isolated(exe, spec, isolate::DEADLINE),
            None => ChatTemplate::compile(spec),
        }
    }

    /// Compiles `source` to run in child processes started from `exe` (which calls
    /// `isolate::serve_if_worker` first thing), each stopped after `deadline`; compiling is
    /// the first such child.
    pub fn in_child(
        exe: &'static Path,
        source: &str,
        bos_token: &str,
        eos_token: &str,
        deadline: Duration,
    ) -> Result<ChatTemplate, ChatError> {
        ChatTemplate::isolated(
            exe,
            TemplateSpec::new(source, bos_token, eos_token),
            deadline,
        )
    }

    /// Compiles `source` to run in this process, bounded by the instruction budget only: for
    /// trusted templates (built-in ones, and inside a worker).
    pub fn in_process(
        source: &str,
        bos_token: &str,
        eos_token: &str,
    ) -> Result<ChatTemplate, ChatError> {
        ChatTemplate::compile(TemplateSpec::new(source, bos_token, eos_token))
    }

    fn isolated(
        exe: &'static Path,
        spec: TemplateSpec,
        deadline: Duration,
    ) -> Result<ChatTemplate, ChatError> {
        // Compiled once here, so that a syntax error shows when the template is loaded.
        let job = Job {
            spec: Cow::Borrowed(&spec),
            render: None,
            caps: false,
        };
        isolate::run(exe, &job, deadline)?;
        Ok(ChatTemplate {
            engine: Engine::Isolated { exe, deadline },
            spec,
            thinks: std::sync::OnceLock::new(),
            caps: std::sync::OnceLock::new(),
        })
    }

    /// `spec` compiled here.
    pub(super) fn compile(spec: TemplateSpec) -> Result<ChatTemplate, ChatError> {
        let mut env = Environment::new();
        // transformers renders chat templates with these two settings.
        env.set_trim_blocks(true);
        env.set_lstrip_blocks(true);
        // A GGUF's template is untrusted code: bound what one rendering may do.
        env.set_fuel(Some(spec.fuel));
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function("raise_exception", raise_exception);
        env.add_function("strftime_now", strftime_now);
        // transformers' `tojson` (Python's json.dumps: ", " and ": ", no HTML escaping, keys in
        // their order), not minijinja's compact, HTML-safe one.
        env.add_filter("tojson", pyjson::tojson_filter);
        // Lists and dicts print as Python's str() writes them (`{{ tools }}`, `tool|string`).
        env.add_filter("string", |v: Value| match v.kind() {
            ValueKind::Seq | ValueKind::Map | ValueKind::Iterable => {
                Value::from(pyjson::py_repr(&v))
            }
            ValueKind::String => v,
            _ => Value::from(v.to_string()),
        });
        env.set_formatter(|out, state, value| match value.kind() {
            ValueKind::Seq | ValueKind::Map | ValueKind::Iterable => {
                out.write_str(&pyjson::py_repr(value))?;
                Ok(())
            }
            _ => minijinja::escape_formatter(out, state, value),
        });
        env.add_template_owned("chat", rewritten_for_minijinja(&spec.source))
            .map_err(|e| ChatError::Syntax(describe(&e)))?;
        Ok(ChatTemplate {
            engine: Engine::InProcess(Box::new(env)),
            spec,
            thinks: std::sync::OnceLock::new(),
            caps: std::sync::OnceLock::new(),
        })
    }

    /// Whether renderings run in child processes that can be stopped.
    pub fn is_isolated(&self) -> bool {
        matches!(self.engine, Engine::Isolated { .. })
    }

    /// The ChatML template llama.cpp falls back to.
    pub fn chatml() -> ChatTemplate {
        ChatTemplate::in_process(CHATML, "", "").expect("the ChatML template compiles")
    }

    /// The model's own template (`tokenizer.chat_template`), or ChatML when it has none.
    pub fn from_gguf(file: &GgufFile, tok: &Tokenizer) -> Result<ChatTemplate, ChatError> {
        let source = file.get_str("tokenizer.chat_template").unwrap_or(CHATML);
        ChatTemplate::for_tokenizer(source, tok)
    }

    /// Compiles `source` with the BOS and EOS texts of `tok`.
    pub fn for_tokenizer(source: &str, tok: &Tokenizer) -> Result<ChatTemplate, ChatError> {
        let text = |id: Option<u32>| {
            id.map(|id| String::from_utf8_lossy(tok.token_to_piece(id, true)).into_owned())
                .unwrap_or_default()
        };
        ChatTemplate::new(source, &text(tok.bos()), &text(tok.eos()))
    }

    /// Changes the instruction budget of each rendering ([`RENDER_FUEL`] unless changed). The
    /// fuzz harness lowers it: a template that loops until the budget runs out takes the same
    /// paths on a smaller one, in a fraction of the time.
    pub fn set_fuel(&mut self, fuel: u64) {
        self.spec.fuel = fuel;
        if let Engine::InProcess(env) = &mut self.engine {
            env.set_fuel(Some(fuel));
        }
    }

    /// The Jinja source.
    pub fn source(&self) -> &str {
        &self.spec.source
    }

    /// The prompt text for `messages`, ending with the assistant's opening when
    /// `add_generation_prompt`.
    pub fn render(
        &self,
        messages: &[Message],
        add_generation_prompt: bool,
    ) -> Result<String, ChatError> {
        let options = RenderOptions {
            add_generation_prompt,
            ..RenderOptions::default()
        };
        self.render_with(messages, &options)
    }

    /// The prompt text for `messages` with `options`: the tools the model may call and the
    /// request's own template variables (`chat_template_kwargs`).
    pub fn render_with(
        &self,
        messages: &[Message],
        options: &RenderOptions,
    ) -> Result<String, ChatError> {
        // As llama.cpp: `enable_thinking` is true where the template thinks, unless asked.
        let with_thinking;
        let options = match options.kwargs.contains_key("enable_thinking") {
            true => options,
            false => {
                let mut with = options.clone();
                with.kwargs
                    .insert("enable_thinking".into(), self.thinks().into());
                with_thinking = with;
                &with_thinking
            }
        };
        if !super::gemma4::needs_folding(self.source()) {
            return self.render_given(messages, options);
        }
        let folded = super::gemma4::fold_tool_responses(messages);
        let mut text = self.render_given(&folded, options)?;
        if options.add_generation_prompt {
            super::gemma4::open_model_turn(&mut text);
        }
        Ok(text)
    }

    /// Whether the template has a thinking switch: its opening for a plain question differs
    /// with `enable_thinking` true and false, and the difference names thinking (`<think>`,
    /// `<|START_THINKING|>`, ...), as llama.cpp's template analysis decides it.
    pub fn thinks(&self) -> bool {
        *self.thinks.get_or_init(|| {
            let ask = [Message::new("user", "test")];
            // Some templates need a tool list to render at all (`tools | length`).
            let probe = |on: bool| {
                let mut options = RenderOptions {
                    add_generation_prompt: true,
                    ..RenderOptions::default()
                };
                options.kwargs.insert("enable_thinking".into(), on.into());
                self.render_given(&ask, &options).ok().or_else(|| {
                    options.tools = Some(serde_json::json!([]));
                    self.render_given(&ask, &options).ok()
                })
            };
            let (Some(on), Some(off)) = (probe(true), probe(false)) else {
                return false;
            };
            let common = on
                .bytes()
                .zip(off.bytes())
                .take_while(|(a, b)| a == b)
                .count();
            let tail = |s: &str| s.get(common..).unwrap_or("").to_ascii_lowercase();
            on != off && (tail(&on).contains("think") || tail(&off).contains("think"))
        })
    }

    /// What the template can take, as llama.cpp's capability probe decides (see `caps`); probed
    /// once, in a worker where templates run in one. A worker that fails leaves llama.cpp's
    /// assumptions before probing.
    pub fn caps(&self) -> TemplateCaps {
        *self.caps.get_or_init(|| match &self.engine {
            Engine::InProcess(env) => super::caps::detect(env),
            Engine::Isolated { exe, deadline } => {
                let job = Job {
                    spec: Cow::Borrowed(&self.spec),
                    render: None,
                    caps: true,
                };
                isolate::run(exe, &job, *deadline)
                    .ok()
                    .flatten()
                    .and_then(|text| serde_json::from_str(&text).ok())
                    .unwrap_or_default()
            }
        })
    }

    fn render_given(
        &self,
        messages: &[Message],
        options: &RenderOptions,
    ) -> Result<String, ChatError> {
        let env = match &self.engine {
            Engine::InProcess(env) => env,
            Engine::Isolated { exe, deadline } => {
                let job = Job {
                    spec: Cow::Borrowed(&self.spec),
                    render: Some(RenderArgs {
                        messages: Cow::Borrowed(messages),
                        options: Cow::Borrowed(options),
                    }),
                    caps: false,
                };
                let text = isolate::run(exe, &job, *deadline)?;
                return text.ok_or_else(|| ChatError::Worker("it rendered nothing".into()));
            }
        };
        let tmpl = env
            .get_template("chat")
            .map_err(|e| ChatError::Syntax(describe(&e)))?;
        let first = Self::render_in(&tmpl, &self.spec, messages, options);
        // Templates that print a call's arguments as text (Functionary v3.2) get them as a JSON
        // string, as llama.cpp gives them to templates that do not take an object.
        let strings = match &first {
            Err(_) => with_string_arguments(messages),
            Ok(_) => None,
        };
        match strings {
            Some(m) => Self::render_in(&tmpl, &self.spec, &m, options).or(first),
            None => first,
        }
    }

    fn render_in(
        tmpl: &minijinja::Template,
        spec: &TemplateSpec,
        messages: &[Message],
        options: &RenderOptions,
    ) -> Result<String, ChatError> {
        // As transformers and llama.cpp: the request's variables first, then ours over them.
        let mut ctx = options.kwargs.clone();
        let json = |v| serde_json::to_value(v).unwrap_or(serde_json::Value::Null);
        ctx.insert("messages".into(), json(messages));
        ctx.insert(
            "add_generation_prompt".into(),
            options.add_generation_prompt.into(),
        );
        ctx.insert("bos_token".into(), spec.bos_token.clone().into());
        ctx.insert("eos_token".into(), spec.eos_token.clone().into());
        let tools = options.tools.clone().unwrap_or(serde_json::Value::Null);
        ctx.insert("tools".into(), tools);
        tmpl.render(Value::from_serialize(&ctx))
            .map_err(|e| ChatError::Render(describe(&e)))
    }
}

/// What a rendering is given besides the messages.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct RenderOptions {
    /// End with the assistant's opening.
    pub add_generation_prompt: bool,
    /// The functions the model may call (OpenAI's `tools`: `[{"type": "function", "function":
    /// {"name", "description", "parameters"}}]`), as the template's `tools`.
    pub tools: Option<serde_json::Value>,
    /// More template variables (a request's `chat_template_kwargs`, e.g. `enable_thinking`).
    pub kwargs: serde_json::Map<String, serde_json::Value>,
}

/// The error's message with its cause chain, in one line.
fn describe(e: &minijinja::Error) -> String {
    let mut s = match e.detail() {
        Some(d) if e.kind() == ErrorKind::InvalidOperation => d.to_string(),
        _ => e.to_string(),
    };
    let mut cause = std::error::Error::source(e);
    while let Some(c) = cause {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cause = c.source();
    }
    s
}

/// `messages` with every call's object arguments as JSON text; `None` when none has any.
fn with_string_arguments(messages: &[Message]) -> Option<Vec<Message>> {
    let mut changed = false;
    let mut out = messages.to_vec();
    for call in out.iter_mut().flat_map(|m| m.tool_calls.iter_mut()) {
        if !call.function.arguments.is_string() {
            let text = super::pyjson::to_python_json(&call.function.arguments);
            call.function.arguments = serde_json::Value::String(text);
            changed = true;
        }
    }
    changed.then_some(out)
}

/// Python's list methods on a namespace's list, which Kimi-K2's templates use and minijinja's
/// immutable lists lack, as plain assignments kept across loop scopes as the namespace keeps
/// them: `set _ = ns.items.append(x)` as `set ns.items = ns.items + [x]`, and
/// `set y = ns.items.pop(0)` (or `pop()`, `pop(-1)`) as taking the item, then the rest.
fn namespace_list_method(statement: &str) -> Option<Vec<String>> {
    let (target, call) = statement.strip_prefix("set ")?.split_once('=')?;
    let ident = |s: &str| !s.is_empty() && s.chars().all(|c| c == '_' || c.is_ascii_alphanumeric());
    let target = target.trim();
    if !ident(target) {
        return None;
    }
    let call = call.trim().strip_suffix(')')?;
    let (receiver, method) = call.rsplit_once('(')?;
    let (list, name) = receiver.trim().rsplit_once('.')?;
    let (space, field) = list.split_once('.')?;
    if !ident(space) || !ident(field) {
        return None;
    }
    let list = format!("{space}.{field}");
    match name {
        "append" => {
            // The item is everything inside the outermost parentheses.
            let item = call.split_once(".append(")?.1;
            Some(vec![format!("set {list} = {list} + [{item}]")])
        }
        "pop" => match method.trim() {
            "0" => Some(vec![
                format!("set {target} = {list}[0]"),
                format!("set {list} = {list}[1:]"),
            ]),
            "" | "-1" => Some(vec![
                format!("set {target} = {list}[-1]"),
                format!("set {list} = {list}[:-1]"),
            ]),
            _ => None,
        },
        _ => None,
    }
}

/// transformers' `{% generation %}...{% endgeneration %}` (it marks the assistant's tokens
/// for training masks and renders its body as is) as an `if true` block, whitespace control
/// kept; and [`namespace_list_method`].
fn rewritten_for_minijinja(source: &str) -> String {
    let mut out = String::with_capacity(source.len());
    let mut rest = source;
    while let Some(open) = rest.find("{%") {
        // The closing delimiter after the opening one (`{%}` is not a tag).
        let Some(len) = rest[open + 2..].find("%}").map(|n| n + 2) else {
            break;
        };
        let tag = &rest[open..open + len + 2];
        let inner = tag[2..tag.len() - 2].trim_matches(|c: char| c == '-' || c == '+');
        out.push_str(&rest[..open]);
        match inner.trim() {
            "generation" => out.push_str(&tag.replacen("generation", "if true", 1)),
            "endgeneration" => out.push_str(&tag.replacen("endgeneration", "endif", 1)),
            statement => match namespace_list_method(statement) {
                Some(sets) => {
                    // The tag's own delimiters around each statement: whitespace control kept.
                    let body = &tag[2..tag.len() - 2];
                    let lead = &body[..body.len() - body.trim_start_matches(['-', '+']).len()];
                    let trail = &body[body.trim_end_matches(['-', '+']).len()..];
                    for set in sets {
                        out.push_str(&format!("{{%{lead} {set} {trail}%}}"));
                    }
                }
                None => out.push_str(tag),
            },
        }
        rest = &rest[open + len + 2..];
    }
    out.push_str(rest);
    out
}

/// `raise_exception(msg)`: how templates refuse a conversation (e.g. roles not alternating).
fn raise_exception(msg: String) -> Result<Value, minijinja::Error> {
    Err(minijinja::Error::new(ErrorKind::InvalidOperation, msg))
}

/// `strftime_now(format)`: today's date in UTC, for templates that mention it. Supports the
/// directives templates use: `%d %m %Y %y %b %B %H %M %S %%`.
fn strftime_now(format: String) -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    strftime(secs, &format)
}

fn strftime(secs: u64, format: &str) -> String {
    const MONTHS: [&str; 12] = [
        "January",
        "February",
        "March",
        "April",
        "May",
        "June",
        "July",
        "August",
        "September",
        "October",
        "November",
        "December",
    ];
    let days = (secs / 86400) as i64;
    let tod = secs % 86400;
    let (y, m, d) = crate::calendar::civil_from_days(days);
    let mut out = String::new();
    let mut chars = format.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('d') => out.push_str(&format!("{d:02}")),
            Some('m') => out.push_str(&format!("{m:02}")),
            Some('Y') => out.push_str(&y.to_string()),
            Some('y') => out.push_str(&format!("{:02}", y % 100)),
            Some('b') => out.push_str(&MONTHS[(m - 1) as usize][..3]),
            Some('B') => out.push_str(MONTHS[(m - 1) as usize]),
            Some('H') => out.push_str(&format!("{:02}", tod / 3600)),
            Some('M') => out.push_str(&format!("{:02}", tod / 60 % 60)),
            Some('S') => out.push_str(&format!("{:02}", tod % 60)),
            Some('%') => out.push('%'),
            Some(other) => {
                out.push('%');
                out.push(other);
            }
            None => out.push('%'),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const SMOLLM2: &str = "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

    #[test]
    fn smollm2_template_adds_default_system() {
        let t = ChatTemplate::new(SMOLLM2, "", "").unwrap();
        let out = t.render(&[Message::new("user", "Hi")], true).unwrap();
        assert_eq!(
            out,
            "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
        );
    }

    #[test]
    fn python_methods_and_block_trimming() {
        // As Python's jinja2 with trim_blocks and lstrip_blocks renders it: 'HI|user\n'.
        let src = "{% for m in messages %}\n{{ m.content.strip().upper() }}|{{ m.get('role') }}\n    {% endfor %}";
        let t = ChatTemplate::new(src, "", "").unwrap();
        let out = t.render(&[Message::new("user", "  hi  ")], false).unwrap();
        assert_eq!(out, "HI|user\n");
    }

    #[test]
    fn a_template_that_loops_without_end_is_stopped() {
        let src =
            "{% for i in range(100000) %}{% for j in range(100000) %}x{% endfor %}{% endfor %}";
        let t = ChatTemplate::new(src, "", "").unwrap();
        let e = t.render(&[Message::new("user", "hi")], true).unwrap_err();
        assert!(matches!(e, ChatError::Render(_)), "{e}");
        assert!(e.to_string().contains("fuel"), "{e}");
    }

    #[test]
    fn the_budget_can_be_lowered() {
        // 1,000 iterations: within the default budget, beyond a budget of 500 instructions.
        let src = "{% for i in range(1000) %}x{% endfor %}";
        let mut t = ChatTemplate::new(src, "", "").unwrap();
        assert_eq!(t.render(&[], false).unwrap().len(), 1000);
        t.set_fuel(500);
        let e = t.render(&[], false).unwrap_err();
        assert!(e.to_string().contains("fuel"), "{e}");
    }

    #[test]
    fn raise_exception_is_a_render_error() {
        let src = "{% if messages[0].role != 'user' %}{{ raise_exception('first must be user') }}{% endif %}ok";
        let t = ChatTemplate::new(src, "", "").unwrap();
        let e = t
            .render(&[Message::new("assistant", "x")], false)
            .unwrap_err();
        assert!(
            matches!(e, ChatError::Render(ref m) if m.contains("first must be user")),
            "{e}"
        );
        assert_eq!(t.render(&[Message::new("user", "x")], false).unwrap(), "ok");
    }

    #[test]
    fn syntax_error_is_reported() {
        assert!(matches!(
            ChatTemplate::new("{% for %}", "", ""),
            Err(ChatError::Syntax(_))
        ));
    }

    #[test]
    fn bos_token_is_visible() {
        let t =
            ChatTemplate::new("{{ bos_token }}{{ messages[0].content }}", "<s>", "</s>").unwrap();
        assert_eq!(
            t.render(&[Message::new("user", "a")], false).unwrap(),
            "<s>a"
        );
    }

    #[test]
    fn strftime_known_date() {
        // 2024-02-29 13:05:09 UTC
        assert_eq!(
            strftime(1709211909, "%d %b %Y %H:%M:%S %B %%"),
            "29 Feb 2024 13:05:09 February %"
        );
    }

    #[test]
    fn llama_cpp_compatible_rendering_details() {
        // transformers' generation block renders its body.
        let t = ChatTemplate::new(
            "{%- for m in messages %}{% generation %}[{{ m.content }}]{%- endgeneration %}{% endfor -%}",
            "",
            "",
        )
        .unwrap();
        assert_eq!(
            t.render(&[Message::new("user", "a")], false).unwrap(),
            "[a]"
        );
        // Dicts and lists print as Python's str() writes them.
        let t = ChatTemplate::new(
            "{{ messages[0] }}|{{ messages[0] | string }}|{{ [1, true, none, \"it's\"] }}",
            "",
            "",
        )
        .unwrap();
        let out = t.render(&[Message::new("user", "a\nb")], false).unwrap();
        assert_eq!(
            out,
            "{'role': 'user', 'content': 'a\\nb'}|{'role': 'user', 'content': 'a\\nb'}|[1, True, None, \"it's\"]"
        );
        // enable_thinking is true by default only where the template has a thinking switch.
        let switch = "{% if enable_thinking %}<think>{% else %}<think></think>{% endif %}";
        let t = ChatTemplate::new(switch, "", "").unwrap();
        assert!(t.thinks());
        assert_eq!(t.render(&[], true).unwrap(), "<think>");
        let other = "Deliberation: {{ 'on' if enable_thinking else 'off' }}";
        let t = ChatTemplate::new(other, "", "").unwrap();
        assert!(!t.thinks());
        assert_eq!(t.render(&[], true).unwrap(), "Deliberation: off");
    }

    #[test]
    fn a_namespace_list_can_be_appended_to() {
        let source = "{%- set ns = namespace(ids=[]) -%}{%- for m in messages -%}{%- set _ = ns.ids.append(m.content ~ '!') -%}{%- endfor -%}{{ ns.ids | join(',') }}";
        let t = ChatTemplate::new(source, "", "").unwrap();
        let msgs = [Message::new("user", "a"), Message::new("user", "b(c)")];
        assert_eq!(t.render(&msgs, false).unwrap(), "a!,b(c)!");
        assert_eq!(rewritten_for_minijinja("a{%}b{%- x -%}"), "a{%}b{%- x -%}");
        assert_eq!(namespace_list_method("set x = y.append(1)"), None);
        assert_eq!(namespace_list_method("if a.b.append(1)"), None);
        let source = "{%- set ns = namespace(ids=['a', 'b', 'c']) -%}{%- set x = ns.ids.pop(0) -%}{%- set y = ns.ids.pop() -%}{{ x }}{{ y }}{{ ns.ids }}";
        let t = ChatTemplate::new(source, "", "").unwrap();
        assert_eq!(t.render(&[], false).unwrap(), "ac['b']");
    }

    #[test]
    fn arguments_go_as_text_to_templates_that_print_them_as_text() {
        let source = "{%- for m in messages %}{% for c in m.tool_calls %}{{ c.function.name + ':' + c.function.arguments }}{% endfor %}{% endfor -%}";
        let t = ChatTemplate::new(source, "", "").unwrap();
        let mut m = Message::new("assistant", "");
        m.tool_calls = vec![crate::chat::ToolCall::function(
            "1",
            "f",
            serde_json::json!({"x": [1, "y"]}),
        )];
        assert_eq!(t.render(&[m], false).unwrap(), "f:{\"x\": [1, \"y\"]}");
    }
}
