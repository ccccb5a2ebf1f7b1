//! What a chat template can take (llama-server's `chat_template_caps` in `/props`): string or
//! typed content, a system role, tools, tool calls, parallel calls, object arguments, reasoning
//! kept in the history, a reasoning effort. Worked out as llama.cpp works it out: the template
//! renders a few probe conversations whose values record what the template reads of them.

use super::pyjson;
use minijinja::value::{Enumerator, Kwargs, Object, ObjectRepr, Rest, ValueKind};
use minijinja::{Environment, State, Value};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value as Json};
use std::borrow::Cow;
use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, PoisonError};

/// A template's capabilities, under llama-server's names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TemplateCaps {
    pub supports_string_content: bool,
    pub supports_typed_content: bool,
    pub supports_tools: bool,
    pub supports_tool_calls: bool,
    pub supports_parallel_tool_calls: bool,
    pub supports_system_role: bool,
    pub supports_preserve_reasoning: bool,
    pub supports_reasoning_effort: bool,
    pub supports_object_arguments: bool,
}

impl Default for TemplateCaps {
    /// What llama.cpp assumes before probing.
    fn default() -> TemplateCaps {
        TemplateCaps {
            supports_string_content: true,
            supports_typed_content: false,
            supports_tools: true,
            supports_tool_calls: true,
            supports_parallel_tool_calls: true,
            supports_system_role: true,
            supports_preserve_reasoning: false,
            supports_reasoning_effort: false,
            supports_object_arguments: false,
        }
    }
}

impl TemplateCaps {
    /// The JSON object `/props` reports.
    pub fn to_json(&self) -> Json {
        serde_json::to_value(self).unwrap_or_else(|_| json!({}))
    }
}

/// The content of the first probe: found in the output when the template prints it.
const MARKER: &str = "STRING_MARKER";
const REASONING_MARKER: &str = "<REASONING_CONTENT_PLACEHOLDER>";

/// What one rendering read: the paths of the values looked up (`messages.0.content`), and the
/// operations applied to the marker content.
#[derive(Default)]
struct Reads {
    paths: BTreeSet<String>,
    string_test: bool,
    selectattr: bool,
    /// A content list was iterated (not printed).
    iterated: bool,
    /// A member of a content list's part was read (not printed): content used as a list.
    parts_read: bool,
    /// Inside printing or `tojson`, whose walks over a list are no use of it as a list.
    quiet: u32,
}

type Log = Arc<Mutex<Reads>>;

fn with<R>(log: &Log, f: impl FnOnce(&mut Reads) -> R) -> R {
    f(&mut log.lock().unwrap_or_else(PoisonError::into_inner))
}

/// A JSON object or array that logs each lookup of its members by path.
#[derive(Debug)]
struct Traced {
    value: Json,
    path: String,
    log: Log,
}

impl std::fmt::Debug for Reads {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_set().entries(&self.paths).finish()
    }
}

impl Traced {
    fn wrap(value: &Json, path: String, log: &Log) -> Value {
        match value {
            Json::Object(_) | Json::Array(_) => Value::from_object(Traced {
                value: value.clone(),
                path,
                log: log.clone(),
            }),
            _ => Value::from_serialize(value),
        }
    }

    /// Whether this is a part of a message's content list (`messages.0.content.0`).
    fn is_part(&self) -> bool {
        self.path
            .rsplit_once('.')
            .is_some_and(|(head, last)| head.ends_with(".content") && last.parse::<usize>().is_ok())
    }

    fn child(&self, key: &str) -> String {
        match self.path.is_empty() {
            true => key.to_string(),
            false => format!("{}.{key}", self.path),
        }
    }
}

impl Object for Traced {
    fn repr(self: &Arc<Self>) -> ObjectRepr {
        match self.value {
            Json::Array(_) => ObjectRepr::Seq,
            _ => ObjectRepr::Map,
        }
    }

    fn get_value(self: &Arc<Self>, key: &Value) -> Option<Value> {
        let (found, name) = match &self.value {
            Json::Array(items) => {
                let i = i64::try_from(key.clone()).ok()?;
                let i = if i < 0 { items.len() as i64 + i } else { i };
                let found = usize::try_from(i).ok().and_then(|i| items.get(i));
                (found, i.to_string())
            }
            Json::Object(map) => {
                let name = key.as_str()?;
                (map.get(name), name.to_string())
            }
            _ => return None,
        };
        let path = self.child(&name);
        let found = found?;
        with(&self.log, |r| {
            if self.is_part() {
                r.parts_read |= r.quiet == 0;
            }
            r.paths.insert(path.clone());
        });
        Some(Traced::wrap(found, path, &self.log))
    }

    fn enumerate(self: &Arc<Self>) -> Enumerator {
        if self.path.ends_with(".content") {
            with(&self.log, |r| r.iterated |= r.quiet == 0);
        }
        match &self.value {
            Json::Array(items) => Enumerator::Seq(items.len()),
            Json::Object(map) => {
                Enumerator::Values(map.keys().map(|k| Value::from(k.as_str())).collect())
            }
            _ => Enumerator::Empty,
        }
    }

    /// Printed as JSON, reading nothing.
    fn render(self: &Arc<Self>, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.value)
    }

    fn enumerator_len(self: &Arc<Self>) -> Option<usize> {
        match &self.value {
            Json::Array(items) => Some(items.len()),
            Json::Object(map) => Some(map.len()),
            _ => None,
        }
    }
}

/// One probe's result: whether it rendered, its text, and what it read.
struct Probe {
    ok: bool,
    text: String,
    reads: Reads,
}

impl Probe {
    fn read(&self, path: &str) -> bool {
        self.reads.paths.contains(path)
    }
}

/// Renders the compiled template `chat` of `env` on `messages` and `tools` (and `extra`
/// variables), recording what it reads.
fn probe(env: &Environment<'static>, messages: Json, tools: Json, extra: Json) -> Probe {
    let log: Log = Arc::default();
    let mut env = env.clone();
    let l = log.clone();
    env.add_test("string", move |v: Value| {
        if v.as_str() == Some(MARKER) {
            with(&l, |r| r.string_test = true);
        }
        minijinja::tests::is_string(&v)
    });
    let l = log.clone();
    env.add_filter(
        "selectattr",
        move |state: &State,
              value: Value,
              attr: Cow<'_, str>,
              test: Option<Cow<'_, str>>,
              args: Rest<Value>| {
            if value.as_str() == Some(MARKER) || is_content(&value) {
                with(&l, |r| r.selectattr = true);
            }
            minijinja::filters::selectattr(state, value, attr, test, args)
        },
    );
    // Printing a list, and `tojson`, walk it without using it as a list.
    let l = log.clone();
    env.add_filter(
        "tojson",
        move |v: &Value, indent: Option<Value>, kw: Kwargs| {
            with(&l, |r| r.quiet += 1);
            let out = pyjson::tojson_filter(v, indent, kw);
            with(&l, |r| r.quiet -= 1);
            out
        },
    );
    let l = log.clone();
    env.add_filter("string", move |v: Value| {
        with(&l, |r| r.quiet += 1);
        let out = printed(&v);
        with(&l, |r| r.quiet -= 1);
        Value::from(out)
    });
    let l = log.clone();
    env.set_formatter(move |out, state, value| {
        with(&l, |r| r.quiet += 1);
        let done = match value.kind() {
            ValueKind::Seq | ValueKind::Map | ValueKind::Iterable => out
                .write_str(&pyjson::py_repr(value))
                .map_err(minijinja::Error::from),
            _ => minijinja::escape_formatter(out, state, value),
        };
        with(&l, |r| r.quiet -= 1);
        done
    });
    let mut ctx = json!({
        "messages": messages,
        "tools": tools,
        "bos_token": "",
        "eos_token": "",
        "add_generation_prompt": true,
    });
    if let (Some(ctx), Json::Object(extra)) = (ctx.as_object_mut(), extra) {
        ctx.extend(extra);
    }
    let rendered = env
        .get_template("chat")
        .and_then(|t| t.render(Traced::wrap(&ctx, String::new(), &log)));

    drop(env);
    let reads = std::mem::take(&mut *log.lock().unwrap_or_else(PoisonError::into_inner));
    Probe {
        ok: rendered.is_ok(),
        text: rendered.unwrap_or_default(),
        reads,
    }
}

/// `value` as the `string` filter of chat templates writes it (see `template`).
fn printed(v: &Value) -> String {
    match v.kind() {
        ValueKind::Seq | ValueKind::Map | ValueKind::Iterable => pyjson::py_repr(v),
        ValueKind::String => v.as_str().unwrap_or_default().to_string(),
        _ => v.to_string(),
    }
}

/// Whether `value` is a traced message content (the typed-content probes).
fn is_content(value: &Value) -> bool {
    value
        .downcast_object_ref::<Traced>()
        .is_some_and(|t| t.path.ends_with(".content"))
}

fn user(text: &str) -> Json {
    json!({"role": "user", "content": text})
}

/// The tool the tool probes offer.
fn tools() -> Json {
    json!([{
        "name": "tool",
        "type": "function",
        "function": {
            "name": "tool1",
            "description": "Tool description",
            "parameters": {
                "type": "object",
                "properties": {"arg": {"type": "string", "description": "Arg description"}},
                "required": ["arg"],
            },
        },
    }])
}

/// A conversation where the assistant called `tool1` once per entry of `arguments`.
fn tool_conversation(arguments: &[Json]) -> Json {
    let calls: Vec<Json> = arguments
        .iter()
        .enumerate()
        .map(|(i, args)| {
            json!({
                "id": format!("call0000{}", i + 1),
                "type": "function",
                "function": {"name": "tool1", "arguments": args},
            })
        })
        .collect();
    json!([
        user("User message"),
        {"role": "assistant", "content": "", "tool_calls": calls},
        {"role": "tool", "content": "Tool response", "tool_call_id": "call00001"},
        {"role": "assistant", "content": "The tool response was 'tool response'"},
        user("User message"),
    ])
}

/// Probes the template compiled as `chat` in `env`, deciding as llama.cpp decides.
pub(super) fn detect(env: &Environment<'static>) -> TemplateCaps {
    let mut caps = TemplateCaps::default();
    let none = || json!([]);
    let nothing = || json!({});

    // Content: a string, or a list of typed parts. minijinja iterates a string where
    // llama.cpp's engine fails, so a template's use of content as a list shows on a second
    // rendering with content given as a one-part list.
    let plain = probe(env, json!([user(MARKER)]), none(), nothing());
    let checks_for_string = plain.reads.string_test;
    let listed = json!([{"role": "user", "content": [{"type": "text", "text": MARKER}]}]);
    let as_list = probe(env, listed, none(), nothing());
    let used_as_array =
        plain.reads.selectattr || (!checks_for_string && as_list.ok && as_list.reads.parts_read);
    if used_as_array {
        caps.supports_typed_content = true;
    }
    if !plain.ok || (used_as_array && !plain.text.contains(MARKER)) {
        caps.supports_string_content = false;
    }
    if checks_for_string {
        let empty = json!([{"role": "user", "content": []}]);
        let typed = probe(env, empty, none(), nothing());
        if typed.ok && (typed.reads.selectattr || typed.reads.iterated) {
            caps.supports_typed_content = true;
        }
    }

    let system = json!([
        {"role": "system", "content": "System message"},
        user("User message"),
    ]);
    if !probe(env, system, none(), nothing()).read("messages.0.content") {
        caps.supports_system_role = false;
    }

    let object_args = json!({"arg": "value"});
    let p = probe(
        env,
        tool_conversation(std::slice::from_ref(&object_args)),
        tools(),
        nothing(),
    );
    if p.ok {
        if !p.read("tools.0.function.name") {
            caps.supports_tools = false;
        }
        if !p.read("messages.1.tool_calls") {
            caps.supports_tool_calls = false;
        } else if p.read("messages.1.tool_calls.0.function.arguments.arg") {
            caps.supports_object_arguments = true;
        }
    }
    let string_args = json!(r#"{"arg": "value"}"#);
    if !caps.supports_object_arguments {
        let p = probe(
            env,
            tool_conversation(std::slice::from_ref(&string_args)),
            tools(),
            nothing(),
        );
        if !p.ok {
            caps.supports_tool_calls = false;
            caps.supports_tools = false;
        } else {
            if !p.read("tools.0.function.name") {
                caps.supports_tools = false;
            }
            if !p.read("messages.1.tool_calls") {
                caps.supports_tool_calls = false;
            }
        }
    }

    let args = match caps.supports_object_arguments {
        true => object_args,
        false => string_args,
    };
    let p = probe(
        env,
        tool_conversation(&[args.clone(), args]),
        tools(),
        nothing(),
    );
    if !p.ok || !p.read("messages.1.tool_calls.1.function") {
        caps.supports_parallel_tool_calls = false;
    }

    let turn = |reasoning: &str| json!({"role": "assistant", "content": "Assistant message", "reasoning_content": reasoning});
    let history = json!([
        user("User message"),
        turn(REASONING_MARKER),
        user("User message"),
        turn("Reasoning content"),
        user("User message"),
    ]);
    let keep = json!({
        "enable_thinking": true,
        "preserve_thinking": true,
        "clear_thinking": false,
        "truncate_history_thinking": false,
        "drop_thinking": false,
    });
    if probe(env, history, none(), keep)
        .text
        .contains(REASONING_MARKER)
    {
        caps.supports_preserve_reasoning = true;
    }

    let effort = json!({
        "enable_thinking": true,
        "reasoning_effort": "low",
        "reasoning_strength": "low",
    });
    let p = probe(env, json!([user("User message")]), none(), effort);
    // (llama.cpp binds both names to one value)
    caps.supports_reasoning_effort = p.read("reasoning_effort") || p.read("reasoning_strength");
    caps
}

#[cfg(test)]
mod tests {
    use super::TemplateCaps;
    use crate::chat::ChatTemplate;

    fn caps(source: &str) -> TemplateCaps {
        ChatTemplate::in_process(source, "", "").unwrap().caps()
    }

    #[test]
    fn plain_template_takes_strings_and_a_system_role_only() {
        let c = caps("{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}");
        let expect = TemplateCaps {
            supports_tools: false,
            supports_tool_calls: false,
            supports_parallel_tool_calls: false,
            ..TemplateCaps::default()
        };
        assert_eq!(c, expect);
    }

    #[test]
    fn typed_content_and_a_refused_system_role() {
        let src = "{% for m in messages %}{% if m.role == 'system' %}\
            {{ raise_exception('no system') }}{% endif %}\
            {% if m.content is string %}{{ m.content }}\
            {% else %}{% for p in m.content %}{{ p.text }}{% endfor %}{% endif %}{% endfor %}";
        let c = caps(src);
        assert!(c.supports_string_content && c.supports_typed_content);
        assert!(!c.supports_system_role);
        // Content read only as a list of parts: no string content.
        let c = caps(
            "{% for m in messages %}{% for p in m.content %}{{ p.text }}{% endfor %}{% endfor %}",
        );
        assert!(!c.supports_string_content && c.supports_typed_content);
    }

    #[test]
    fn tools_calls_arguments_reasoning() {
        let src = "{{ tools | tojson }}{% for m in messages %}{{ m.content }}\
            {% for c in m.tool_calls or [] %}{{ c.function.name }}{{ c.function.arguments | tojson }}{% endfor %}\
            {% if m.reasoning_content %}{{ m.reasoning_content }}{% endif %}{% endfor %}\
            {% if reasoning_effort %}{{ reasoning_effort }}{% endif %}";
        let c = caps(src);
        assert!(c.supports_tools && c.supports_tool_calls && c.supports_parallel_tool_calls);
        assert!(c.supports_object_arguments);
        assert!(c.supports_preserve_reasoning && c.supports_reasoning_effort);
    }

    /// Each template of llama.cpp's `models/templates/` where this machine has them, against
    /// llama-server's answers (tools/make-server-shape-refs.py).
    #[test]
    fn llama_cpp_templates_as_llama_server() {
        let recorded: serde_json::Value = serde_json::from_str(include_str!(
            "../../tests/data/server/chat-template-caps.json"
        ))
        .unwrap();
        let dir = format!(
            "{}/.cache/llama-cpp-ref/src/llama_cpp_python-0.3.36/vendor/llama.cpp/models/templates",
            std::env::var("HOME").unwrap_or_default()
        );
        let mut differ = Vec::new();
        let mut checked = 0;
        for (name, want) in recorded["templates"].as_object().unwrap() {
            // Adds the undefined `functions` and `datetime` to strings, which llama.cpp's
            // engine allows and minijinja refuses: it renders nothing here, probes or not.
            if name == "fireworks-ai-llama-3-firefunction-v2.jinja" {
                continue;
            }
            let Ok(source) = std::fs::read_to_string(format!("{dir}/{name}")) else {
                continue;
            };
            let Ok(t) = ChatTemplate::in_process(&source, "", "") else {
                differ.push(format!("{name}: does not compile"));
                continue;
            };
            checked += 1;
            let got = t.caps().to_json();
            if &got != want {
                differ.push(format!("{name}: ours {got}, llama-server {want}"));
            }
        }
        if checked == 0 {
            eprintln!("no llama.cpp templates at {dir}");
        }
        assert!(differ.is_empty(), "{}", differ.join("\n"));
    }
}
