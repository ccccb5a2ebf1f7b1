//! Tool calls in a model's reply: which format a chat template teaches its model
//! ([`Format::detect`]), reading the calls out of a finished reply ([`Format::parse`]), where a
//! call may begin in a stream ([`Format::triggers`]), and the grammar that makes the model write
//! a well-formed call of one of the given tools ([`Format::call_gbnf`]). One file per format
//! family, each with replies written by hand in its format as tests; this module holds the
//! pieces their grammars share (`Gbnf`).
//!
//! A reply that does not parse as the format's calls is returned as content, never an error: a
//! model may always answer in words. Thinking (`<think>`, `<|START_THINKING|>`, `[THINK]`)
//! stays in the content, except in GPT-OSS's channels, where only the final channel is content.

mod command_r;
mod deepseek;
mod functionary;
mod generic;
mod glm;
mod gpt_oss;
mod granite;
mod hermes;
mod json_scan;
mod kimi_k2;
mod llama3;
mod mistral;
mod qwen3_coder;
mod xml_args;

use super::ToolCall;
use crate::sampling::grammar::json_schema::{self, SchemaError};
use serde_json::Value;
use std::collections::HashMap;

/// A function the model may call: its name and the JSON schema of its arguments.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolSpec {
    pub name: String,
    pub parameters: Value,
}

/// A reply read by a format: the text meant for the user, and the calls.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Reply {
    pub content: String,
    /// In the order written; a call's `id` is empty where the format carries none (the server
    /// gives each one).
    pub tool_calls: Vec<ToolCall>,
}

impl Reply {
    /// A reply of text only.
    pub fn text(content: &str) -> Reply {
        Reply {
            content: content.to_string(),
            tool_calls: Vec::new(),
        }
    }

    /// The reply of `calls` with `content` around them (trimmed); text only when there are no
    /// calls, `text` being the reply as written.
    fn calls_or_text(text: &str, content: &str, calls: Vec<ToolCall>) -> Reply {
        if calls.is_empty() {
            return Reply::text(text);
        }
        Reply {
            content: content.trim().to_string(),
            tool_calls: calls,
        }
    }
}

/// A tool-call format, named after the model family that writes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// `<tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>`: Hermes 2 Pro and 3,
    /// Qwen 2.5 (and its Coder models), Qwen 3, SmolLM3, Granite 4 and others trained on it.
    Hermes,
    /// `<tool_call>\n<function=NAME>\n<parameter=P>\nVALUE\n</parameter>\n</function>\n
    /// </tool_call>`: Qwen3-Coder, Qwen 3.5, Nemotron Nano 3.
    Qwen3Coder,
    /// The whole reply is `{"name": ..., "parameters": {...}}`, or a built-in tool after
    /// `<|python_tag|>`: Llama 3.1, 3.2 and 3.3.
    Llama3,
    /// `[TOOL_CALLS][{"name", "arguments", "id"}, ...]`: Mistral Nemo.
    MistralNemo,
    /// `[TOOL_CALLS]NAME[ARGS]{...}`: Devstral, Ministral, Magistral.
    Mistral,
    /// `[TOOL_CALLS]NAME[CALL_ID]ID[ARGS]{...}`: Mistral Small 3.2.
    MistralCallId,
    /// `<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\n```json\n{...}\n```
    /// <｜tool▁call▁end｜>...<｜tool▁calls▁end｜>`: DeepSeek R1 and its distills.
    DeepSeekR1,
    /// `<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{...}<｜tool▁call▁end｜>...`:
    /// DeepSeek V3.1.
    DeepSeekV31,
    /// `<function=NAME>{...}</function>`, and code after `<|python_tag|>`: Functionary v3.1.
    FunctionaryV31,
    /// `NAME\n{...}` then `>>>NAME\n{...}` (the prompt ends in the first `>>>`), and
    /// `all\ntext` for words: Functionary v3.2.
    FunctionaryV32,
    /// `<|START_ACTION|>[{"tool_call_id", "tool_name", "parameters"}, ...]<|END_ACTION|>`, words
    /// in `<|START_RESPONSE|>...<|END_RESPONSE|>`: Command R7B.
    CommandR7b,
    /// Harmony channels: `<|channel|>commentary to=functions.NAME <|constrain|>json<|message|>
    /// {...}`, the final channel's text as content: GPT-OSS.
    GptOss,
    /// `<|tool_call|>[{"name", "arguments"}, ...]`: Granite 3.
    Granite,
    /// `<|tool_calls_section_begin|><|tool_call_begin|>functions.NAME:IDX
    /// <|tool_call_argument_begin|>{...}<|tool_call_end|>...<|tool_calls_section_end|>`: Kimi K2.
    KimiK2,
    /// `<tool_call>NAME\n<arg_key>K</arg_key>\n<arg_value>V</arg_value>\n</tool_call>`: GLM 4.5
    /// and 4.6.
    Glm,
    /// GLM's calls with nothing between the tags: GLM 4.7.
    Glm47,
    /// llama.cpp's generic format for templates that teach none: the whole reply is JSON,
    /// `{"tool_call": {"name", "arguments"}}`, `{"tool_calls": [...]}` or `{"response": "..."}`.
    Generic,
}

impl Format {
    /// The format a chat template's source teaches (the generic one when it names none). The
    /// most specific markers are looked at first: Qwen3-Coder and GLM share `<tool_call>` with
    /// Hermes, Functionary v3.1 shares Llama 3's headers
    /// and Qwen3-Coder's `<function=`.
    pub fn detect(template: &str) -> Format {
        let has = |s: &str| template.contains(s);
        if has("<|channel|>") {
            Format::GptOss
        } else if has("<|tool_calls_section_begin|>") {
            Format::KimiK2
        } else if has(deepseek::CALLS_BEGIN) {
            if has("```json") {
                Format::DeepSeekR1
            } else {
                Format::DeepSeekV31
            }
        } else if has(">>>all") {
            Format::FunctionaryV32
        } else if has("<|START_ACTION|>") {
            Format::CommandR7b
        } else if has("[TOOL_CALLS]") {
            match (has("[ARGS]"), has("[CALL_ID]")) {
                (true, true) => Format::MistralCallId,
                (true, false) => Format::Mistral,
                (false, _) => Format::MistralNemo,
            }
        } else if has("<|tool_call|>") {
            Format::Granite
        } else if has("<arg_key>") {
            if has("</arg_key><arg_value>") {
                Format::Glm47
            } else {
                Format::Glm
            }
        } else if has("<tool_call>") && has("<function=") {
            Format::Qwen3Coder
        } else if has("<tool_call>") {
            Format::Hermes
        } else if has("<function=") && !has("<parameter=") {
            Format::FunctionaryV31
        } else if has("<|start_header_id|>ipython<|end_header_id|>") || has("<|python_tag|>") {
            Format::Llama3
        } else {
            Format::Generic
        }
    }

    /// A short name for messages and logs.
    pub fn name(self) -> &'static str {
        match self {
            Format::Hermes => "hermes",
            Format::Qwen3Coder => "qwen3-coder",
            Format::Llama3 => "llama3",
            Format::MistralNemo => "mistral-nemo",
            Format::Mistral => "mistral",
            Format::MistralCallId => "mistral-call-id",
            Format::DeepSeekR1 => "deepseek-r1",
            Format::DeepSeekV31 => "deepseek-v3.1",
            Format::FunctionaryV31 => "functionary-v3.1",
            Format::FunctionaryV32 => "functionary-v3.2",
            Format::CommandR7b => "command-r7b",
            Format::GptOss => "gpt-oss",
            Format::Granite => "granite",
            Format::KimiK2 => "kimi-k2",
            Format::Glm => "glm",
            Format::Glm47 => "glm-4.7",
            Format::Generic => "generic",
        }
    }

    /// The calls in a finished reply, and the text around them as content. Without the tools,
    /// the XML formats (Qwen3-Coder, GLM) read every argument as a string: see
    /// [`Format::parse_with_tools`].
    pub fn parse(self, text: &str) -> Reply {
        self.parse_with_tools(text, &[])
    }

    /// [`Format::parse`] knowing the tools offered: the XML formats read an argument as the
    /// JSON its schema asks for (`<parameter=n>\n3\n</parameter>` is the number 3 when `n` is
    /// an integer, the string "3" when a string), and Llama 3's bare JSON is a call only when
    /// it names one of them.
    pub fn parse_with_tools(self, text: &str, tools: &[ToolSpec]) -> Reply {
        match self {
            Format::Hermes => hermes::parse(text),
            Format::Qwen3Coder => qwen3_coder::parse(text, tools),
            Format::Llama3 => llama3::parse(text, tools),
            Format::MistralNemo | Format::Mistral | Format::MistralCallId => mistral::parse(text),
            Format::DeepSeekR1 | Format::DeepSeekV31 => deepseek::parse(text),
            Format::FunctionaryV31 => functionary::parse_v31(text),
            Format::FunctionaryV32 => functionary::parse_v32(text),
            Format::CommandR7b => command_r::parse(text),
            Format::GptOss => gpt_oss::parse(text),
            Format::Granite => granite::parse(text),
            Format::KimiK2 => kimi_k2::parse(text),
            Format::Glm | Format::Glm47 => glm::parse(text, tools),
            Format::Generic => generic::parse(text),
        }
    }

    /// Texts that begin a call: a stream holds back what follows one (and a partial one at its
    /// end) until the reply is parsed. Empty: the whole reply must be read first (the calls
    /// are the whole reply, or the words too are wrapped in the format's markers).
    pub fn triggers(self) -> &'static [&'static str] {
        match self {
            Format::Hermes => hermes::TRIGGERS,
            Format::Qwen3Coder => qwen3_coder::TRIGGERS,
            Format::Llama3 => llama3::TRIGGERS,
            Format::MistralNemo | Format::Mistral | Format::MistralCallId => mistral::TRIGGERS,
            Format::DeepSeekR1 | Format::DeepSeekV31 => deepseek::TRIGGERS,
            Format::FunctionaryV31 => functionary::TRIGGERS_V31,
            Format::Granite => granite::TRIGGERS,
            Format::KimiK2 => kimi_k2::TRIGGERS,
            Format::Glm | Format::Glm47 => glm::TRIGGERS,
            Format::FunctionaryV32 | Format::CommandR7b | Format::GptOss | Format::Generic => &[],
        }
    }

    /// GBNF for a reply that is only a call of one of `tools` (with `parallel`, one or more
    /// calls) in this format, the arguments matching the tool's schema. Llama 3 and GPT-OSS
    /// write one call a turn, so `parallel` changes nothing there. Command R7B's and GPT-OSS's
    /// grammars let the model think first, as their prompts ask.
    pub fn call_gbnf(self, tools: &[ToolSpec], parallel: bool) -> Result<String, SchemaError> {
        if tools.is_empty() {
            return Err(SchemaError {
                path: "/".to_string(),
                problem: "no tools to call".to_string(),
            });
        }
        match self {
            Format::Hermes => hermes::gbnf(tools, parallel),
            Format::Qwen3Coder => qwen3_coder::gbnf(tools, parallel),
            Format::Llama3 => llama3::gbnf(tools),
            Format::MistralNemo => mistral::gbnf_nemo(tools, parallel),
            Format::Mistral => mistral::gbnf_args(tools, parallel, false),
            Format::MistralCallId => mistral::gbnf_args(tools, parallel, true),
            Format::DeepSeekR1 => deepseek::gbnf_r1(tools, parallel),
            Format::DeepSeekV31 => deepseek::gbnf_v31(tools, parallel),
            Format::FunctionaryV31 => functionary::gbnf_v31(tools, parallel),
            Format::FunctionaryV32 => functionary::gbnf_v32(tools, parallel),
            Format::CommandR7b => command_r::gbnf(tools, parallel),
            Format::GptOss => gpt_oss::gbnf(tools),
            Format::Granite => granite::gbnf(tools, parallel),
            Format::KimiK2 => kimi_k2::gbnf(tools, parallel),
            Format::Glm => glm::gbnf(tools, parallel, "\n"),
            Format::Glm47 => glm::gbnf(tools, parallel, ""),
            Format::Generic => generic::gbnf(tools, parallel),
        }
    }
}

/// GBNF whose `root` is `root`, an expression that may use the rule `call`: the JSON object
/// of a call of one of `tools`, `{"name": NAME, KEY: ARGUMENTS}` with `arguments_key` as
/// KEY. Each tool's schema is converted on its own, so that its `$ref`s find their targets.
fn call_grammar(
    tools: &[ToolSpec],
    arguments_key: &str,
    root: &str,
) -> Result<String, SchemaError> {
    let mut g = Gbnf::default();
    g.tool_calls(tools, |t, args| {
        // Written as the converter writes an object of two properties (`space`: its rule for
        // optional whitespace).
        format!(
            "\"{{\" space {} space \":\" space {} space \",\" space {} space \":\" space {args} \"}}\" space",
            json_name_literal("name"),
            json_name_literal(&t.name),
            json_name_literal(arguments_key),
        )
    })?;
    Ok(g.finish(root))
}

/// `one`, or with `parallel` one or more of it separated by `separator` (GBNF expressions).
fn repeated(one: &str, separator: &str, parallel: bool) -> String {
    if parallel {
        format!("( {one} ) ( {separator} ( {one} ) )*")
    } else {
        one.to_string()
    }
}

/// A GBNF grammar assembled from a format's pieces and the tools' JSON schemas. The format
/// names its own rules; those of a schema are named after the rule the schema defines, and the
/// shared JSON rules (`space`, `string`, `value`, ...) are written once. Taken: `call`,
/// `call-N`, `args-N...` ([`Gbnf::tool_calls`]), `param-N-M...` (`xml_args`) and the shared
/// names.
#[derive(Default)]
struct Gbnf {
    rules: Vec<String>,
    has_json: bool,
}

impl Gbnf {
    /// Adds `name ::= body`.
    fn rule(&mut self, name: &str, body: &str) {
        self.rules.push(format!("{name} ::= {body}"));
    }

    /// Defines `name` as a JSON value matching `schema`; the schema's own rules are named
    /// `name-...`, so that several schemas live in one grammar.
    fn json(&mut self, name: &str, schema: &Value) -> Result<(), SchemaError> {
        let gbnf = json_schema::to_gbnf(schema)?;
        let own = gbnf
            .strip_suffix(shared_json_rules())
            .expect("schema grammars end with the shared rules");
        let defs: Vec<(&str, &str)> = own
            .lines()
            .map(|l| l.split_once(" ::= ").expect("one rule a line"))
            .collect();
        let renamed: HashMap<&str, String> = defs
            .iter()
            .map(|&(n, _)| {
                let to = if n == "root" {
                    name.to_string()
                } else {
                    format!("{name}-{n}")
                };
                (n, to)
            })
            .collect();
        for (n, body) in defs {
            let body = rename_refs(body, &renamed);
            self.rule(&renamed[n], &body);
        }
        self.has_json = true;
        Ok(())
    }

    /// Defines `args-{i}` as the arguments of `tools[i]`, and `call` as one of
    /// `piece(tool, "args-{i}")` (a GBNF expression for a call of that tool).
    fn tool_calls(
        &mut self,
        tools: &[ToolSpec],
        piece: impl Fn(&ToolSpec, &str) -> String,
    ) -> Result<(), SchemaError> {
        let mut alts = Vec::new();
        for (i, t) in tools.iter().enumerate() {
            let args = format!("args-{i}");
            self.json(&args, &t.parameters)?;
            let call = format!("call-{i}");
            self.rule(&call, &piece(t, &args));
            alts.push(call);
        }
        self.rule("call", &alts.join(" | "));
        Ok(())
    }

    /// Defines `name` as any text that does not contain `stop` (a right-linear grammar of the
    /// automaton that looks for `stop`, every state accepting, the one that has read all of
    /// `stop` left out).
    fn text_without(&mut self, name: &str, stop: &str) {
        let s: Vec<char> = stop.chars().collect();
        let state = |k: usize| {
            if k == 0 {
                name.to_string()
            } else {
                format!("{name}-{k}")
            }
        };
        // The state after `c` in state `k`: the longest prefix of `stop` that ends the text.
        let next = |k: usize, c: char| {
            let mut seen: Vec<char> = s[..k].to_vec();
            seen.push(c);
            (0..=seen.len().min(s.len()))
                .rev()
                .find(|&l| seen[seen.len() - l..] == s[..l])
                .unwrap_or(0)
        };
        let mut alphabet = s.clone();
        alphabet.sort_unstable();
        alphabet.dedup();
        for k in 0..s.len() {
            let mut alts = vec![String::new()];
            let mut specific = Vec::new();
            let mut by_dest: Vec<(usize, Vec<char>)> = Vec::new();
            for &c in &alphabet {
                let d = next(k, c);
                if d == 0 {
                    continue;
                }
                specific.push(c);
                if d == s.len() {
                    continue;
                }
                match by_dest.iter_mut().find(|(to, _)| *to == d) {
                    Some((_, cs)) => cs.push(c),
                    None => by_dest.push((d, vec![c])),
                }
            }
            for (d, cs) in by_dest {
                alts.push(format!("{} {}", char_class(&cs, false), state(d)));
            }
            alts.push(format!("{} {}", char_class(&specific, true), state(0)));
            self.rule(&state(k), alts.join(" | ").trim_start());
        }
    }

    /// The grammar: `root ::= root`, the rules, and the shared JSON rules where a schema
    /// needed them.
    fn finish(self, root: &str) -> String {
        let mut out = format!("root ::= {root}\n");
        for r in &self.rules {
            out.push_str(r);
            out.push('\n');
        }
        if self.has_json {
            out.push_str(shared_json_rules());
        }
        out
    }
}

/// The rules every schema grammar ends with (`space`, `string`, `value`, ...): what the
/// converter writes for the schema `true` after its `root`.
fn shared_json_rules() -> &'static str {
    static SHARED: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    SHARED.get_or_init(|| {
        let gbnf = json_schema::to_gbnf(&Value::Bool(true)).expect("the schema true converts");
        gbnf.strip_prefix("root ::= value\n")
            .expect("the schema true is any value")
            .to_string()
    })
}

/// `body` with the rule names in `renamed` replaced; literals, character classes and
/// repetition counts are left as they are.
fn rename_refs(body: &str, renamed: &HashMap<&str, String>) -> String {
    let b = body.as_bytes();
    let is_word = |c: u8| c.is_ascii_alphanumeric() || c == b'-';
    let mut out = String::new();
    let mut copied = 0;
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            open @ (b'"' | b'[' | b'{') => {
                let close = match open {
                    b'"' => b'"',
                    b'[' => b']',
                    _ => b'}',
                };
                i += 1;
                while i < b.len() && b[i] != close {
                    i += if b[i] == b'\\' { 2 } else { 1 };
                }
                i += 1;
            }
            c if is_word(c) => {
                let start = i;
                while i < b.len() && is_word(b[i]) {
                    i += 1;
                }
                if let Some(to) = renamed.get(&body[start..i]) {
                    out.push_str(&body[copied..start]);
                    out.push_str(to);
                    copied = i;
                }
            }
            _ => i += 1,
        }
    }
    out.push_str(&body[copied.min(body.len())..]);
    out
}

/// A GBNF character class of `chars` (with `negated`, of every other character).
fn char_class(chars: &[char], negated: bool) -> String {
    let mut out = String::from(if negated { "[^" } else { "[" });
    for &c in chars {
        match c {
            '\\' | ']' | '[' | '^' | '-' => {
                out.push('\\');
                out.push(c);
            }
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c => out.push(c),
        }
    }
    out.push(']');
    out
}

/// A GBNF string literal for `s` (the schema converter's).
fn gbnf_literal(s: &str) -> String {
    json_schema::lit(s)
}

/// The JSON text of a tool's name as a GBNF literal: `"\"get_weather\""`.
fn json_name_literal(name: &str) -> String {
    gbnf_literal(&Value::String(name.to_string()).to_string())
}

/// The text of `text` from `at` up to the first of `ends` (or its end), and the offset of
/// that end.
fn until<'a>(text: &'a str, at: usize, ends: &[&str]) -> (&'a str, usize) {
    let rest = &text[at..];
    let end = ends
        .iter()
        .filter_map(|e| rest.find(e))
        .min()
        .unwrap_or(rest.len());
    (&rest[..end], at + end)
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::sampling::grammar::{Grammar, Matcher};
    use serde_json::json;
    use std::sync::Arc;

    /// Whether the grammar `gbnf` accepts exactly `text`.
    pub fn accepts(gbnf: &str, text: &str) -> bool {
        let g = Grammar::parse(gbnf).unwrap_or_else(|e| panic!("{e}\n{gbnf}"));
        let mut m = Matcher::new(Arc::new(g));
        m.advance(text.as_bytes()) && m.can_end()
    }

    /// Two tools for the grammar tests: `get_weather(city: string, days?: integer)` and
    /// `now()`.
    pub fn weather_tools() -> Vec<ToolSpec> {
        vec![
            ToolSpec {
                name: "get_weather".into(),
                parameters: json!({
                    "type": "object",
                    "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
                    "required": ["city"],
                }),
            },
            ToolSpec {
                name: "now".into(),
                parameters: json!({"type": "object", "properties": {}}),
            },
        ]
    }

    /// Checks a format's grammar against calls written in it: `good` (calls of the weather
    /// tools, one call each) are accepted and read back as `get_weather` or `now` calls,
    /// `bad` (an unknown tool, arguments off the schema) refused, and `two` (two calls)
    /// accepted by the parallel grammar only.
    pub fn check_grammar(format: Format, good: &[&str], bad: &[&str], two: Option<&str>) {
        let tools = weather_tools();
        let g = format.call_gbnf(&tools, false).unwrap();
        for text in good {
            assert!(accepts(&g, text), "{format:?} refuses {text:?}\n{g}");
            // A lazy grammar (tool_choice auto) takes the text from its first trigger on.
            let start = format.triggers().iter().filter_map(|t| text.find(t)).min();
            if let Some(start) = start {
                let rest = &text[start..];
                assert!(
                    accepts(&g, rest),
                    "{format:?} refuses {rest:?} from its trigger\n{g}"
                );
            }
            let r = format.parse_with_tools(text, &tools);
            assert_eq!(r.tool_calls.len(), 1, "{format:?} reads {text:?} as {r:?}");
            let name = &r.tool_calls[0].function.name;
            assert!(name == "get_weather" || name == "now", "{name}");
        }
        for text in bad {
            assert!(!accepts(&g, text), "{format:?} accepts {text:?}\n{g}");
        }
        if let Some(two) = two {
            assert!(!accepts(&g, two), "{format:?} accepts two calls unasked");
            let g = format.call_gbnf(&tools, true).unwrap();
            assert!(accepts(&g, two), "{format:?} refuses {two:?}\n{g}");
            assert_eq!(format.parse_with_tools(two, &tools).tool_calls.len(), 2);
        }
    }

    /// A characteristic excerpt of each template in llama.cpp's `models/templates/`, and the
    /// format it teaches.
    const TEMPLATES: &[(&str, Format)] = &[
        // NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja
        (
            "{{- '<tool_call>\\n' }}{{- tool_call.arguments | tojson }}{{- '\\n</tool_call>' }}",
            Format::Hermes,
        ),
        // Qwen3-Coder.jinja
        (
            "{{- '\\n<tool_call>\\n<function=' + tool_call.name + '>\\n' }}\
             {{- '<parameter=' + args_name + '>\\n' }}",
            Format::Qwen3Coder,
        ),
        // meta-llama-Llama-3.1-8B-Instruct.jinja
        (
            "{{- \"<|python_tag|>\" + tool_call.name + \".call(\" }}\
             {{- \"<|start_header_id|>ipython<|end_header_id|>\\n\\n\" }}",
            Format::Llama3,
        ),
        // meta-llama-Llama-3.2-3B-Instruct.jinja
        (
            "{{- 'Respond in the format {\"name\": function name, \"parameters\": dictionary of \
             argument name and its value}.' }}\
             {{- \"<|start_header_id|>ipython<|end_header_id|>\\n\\n\" }}",
            Format::Llama3,
        ),
        // mistralai-Mistral-Nemo-Instruct-2407.jinja
        (
            "{{- \"[TOOL_CALLS][\" }}{%- set out = tool_call.function|tojson %}",
            Format::MistralNemo,
        ),
        // unsloth-mistral-Devstral-Small-2507.jinja
        (
            "{{- \"[TOOL_CALLS]\" + tool['function']['name'] + \"[ARGS]\" + arguments }}",
            Format::Mistral,
        ),
        // Mistral-Small-3.2-24B-Instruct-2506.jinja
        (
            "{{- '[TOOL_CALLS]' + tool_call.function.name }}{{- '[CALL_ID]' + tool_call.id }}\
             {{- '[ARGS]' + tool_call['function']['arguments']|tojson }}",
            Format::MistralCallId,
        ),
        // deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja
        (
            "{{'<｜Assistant｜><｜tool▁calls▁begin｜><｜tool▁call▁begin｜>' + tool['type'] + \
             '<｜tool▁sep｜>' + tool['function']['name'] + '\\n' + '```json' + '\\n'",
            Format::DeepSeekR1,
        ),
        // deepseek-ai-DeepSeek-V3.1.jinja
        (
            "{{'<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>'+ tool['function']['name'] + \
             '<｜tool▁sep｜>' + tool['function']['arguments'] | tojson + '<｜tool▁call▁end｜>'}}",
            Format::DeepSeekV31,
        ),
        // meetkai-functionary-medium-v3.1.jinja
        (
            "{{ '<|start_header_id|>ipython<|end_header_id|>\\n\\n' + message['content'] }}\
             {{ '<function=' + tool_call['function']['name'] + '>' }}",
            Format::FunctionaryV31,
        ),
        // meetkai-functionary-medium-v3.2.jinja
        (
            "Respond in this format:\\n>>>${recipient}\\n${content}\
             {{ '>>>all\\n' + message['content'] }}",
            Format::FunctionaryV32,
        ),
        // CohereForAI-c4ai-command-r7b-12-2024-tool_use.jinja
        (
            "<|START_THINKING|>{{message.reasoning_content}}<|END_THINKING|><|START_ACTION|>[",
            Format::CommandR7b,
        ),
        // openai-gpt-oss-120b.jinja
        (
            "{{- \"<|start|>assistant to=\" }}{{- \"functions.\" + tool_call.name + \
             \"<|channel|>commentary \" }}",
            Format::GptOss,
        ),
        // ibm-granite-granite-3.3-2B-Instruct.jinja
        (
            "respond only with <|tool_call|> followed by a JSON list of tools used.",
            Format::Granite,
        ),
        // moonshotai-Kimi-K2.jinja
        (
            "<|tool_calls_section_begin|>{%- for tool_call in message['tool_calls'] -%}\
             <|tool_call_begin|>{{ formatted_id }}<|tool_call_argument_begin|>",
            Format::KimiK2,
        ),
        // GLM-4.6.jinja
        (
            "{{ '\\n<tool_call>' + tc.name }}\n<arg_key>{{ k }}</arg_key>\n<arg_value>",
            Format::Glm,
        ),
        // GLM-4.7-Flash.jinja
        (
            "{{- '<tool_call>' + tc.name -}}<arg_key>{{ k }}</arg_key><arg_value>",
            Format::Glm47,
        ),
        // google-gemma-2-2b-it.jinja
        ("{{ '<start_of_turn>' + role + '\\n' }}", Format::Generic),
    ];

    #[test]
    fn detects_from_the_template_source() {
        for (template, format) in TEMPLATES {
            assert_eq!(Format::detect(template), *format, "{template}");
        }
    }

    /// The templates of llama.cpp's source package, where this machine has them (named by
    /// `LLAMA_CPP_TEMPLATES`, or where the reference build unpacks them), are detected as the
    /// excerpts above say.
    #[test]
    fn detects_the_real_templates() {
        let dir = std::env::var("LLAMA_CPP_TEMPLATES").unwrap_or_else(|_| {
            format!(
                "{}/.cache/llama-cpp-ref/src/llama_cpp_python-0.3.36/vendor/llama.cpp/models/templates",
                std::env::var("HOME").unwrap_or_default()
            )
        });
        if !std::path::Path::new(&dir).is_dir() {
            eprintln!("no llama.cpp templates at {dir}: only the excerpts are checked");
            return;
        }
        let expect = [
            (
                "NousResearch-Hermes-3-Llama-3.1-8B-tool_use",
                Format::Hermes,
            ),
            (
                "NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use",
                Format::Hermes,
            ),
            ("Qwen-Qwen2.5-7B-Instruct", Format::Hermes),
            ("Qwen-Qwen3-0.6B", Format::Hermes),
            ("ibm-granite-granite-4.0", Format::Hermes),
            ("Qwen3-Coder", Format::Qwen3Coder),
            ("Qwen3.5-4B", Format::Qwen3Coder),
            ("meta-llama-Llama-3.1-8B-Instruct", Format::Llama3),
            ("meta-llama-Llama-3.2-3B-Instruct", Format::Llama3),
            ("meta-llama-Llama-3.3-70B-Instruct", Format::Llama3),
            ("mistralai-Mistral-Nemo-Instruct-2407", Format::MistralNemo),
            ("unsloth-mistral-Devstral-Small-2507", Format::Mistral),
            ("mistralai-Ministral-3-14B-Reasoning-2512", Format::Mistral),
            ("Mistral-Small-3.2-24B-Instruct-2506", Format::MistralCallId),
            (
                "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B",
                Format::DeepSeekR1,
            ),
            (
                "deepseek-ai-DeepSeek-R1-Distill-Llama-8B",
                Format::DeepSeekR1,
            ),
            ("llama-cpp-deepseek-r1", Format::DeepSeekR1),
            ("deepseek-ai-DeepSeek-V3.1", Format::DeepSeekV31),
            ("meetkai-functionary-medium-v3.1", Format::FunctionaryV31),
            ("meetkai-functionary-medium-v3.2", Format::FunctionaryV32),
            (
                "CohereForAI-c4ai-command-r7b-12-2024-tool_use",
                Format::CommandR7b,
            ),
            ("Cohere2MoE", Format::CommandR7b),
            ("openai-gpt-oss-120b", Format::GptOss),
            ("ibm-granite-granite-3.3-2B-Instruct", Format::Granite),
            ("moonshotai-Kimi-K2", Format::KimiK2),
            ("Kimi-K2-Instruct", Format::KimiK2),
            ("Kimi-K2-Thinking", Format::KimiK2),
            ("GLM-4.6", Format::Glm),
            ("GLM-4.7-Flash", Format::Glm47),
            ("google-gemma-2-2b-it", Format::Generic),
            // Seed-OSS's `<seed:tool_call>` calls are none of these formats.
            ("ByteDance-Seed-OSS", Format::Generic),
        ];
        for (file, format) in expect {
            let path = format!("{dir}/{file}.jinja");
            let src = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
            assert_eq!(Format::detect(&src), format, "{file}");
        }
    }

    /// Every format reads every prefix of a reply in every format without panicking: a model
    /// cut off mid-call (or writing another family's markers) gets its text back.
    #[test]
    fn cut_replies_never_panic() {
        let replies = [
            "Sure.\n<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": \"é\"}}\n</tool_call>",
            "<tool_call>\n<function=f>\n<parameter=a>\né\n</parameter>\n</function>\n</tool_call>",
            "{\"name\": \"f\", \"parameters\": {}}<|python_tag|>f.call(a=\"é\")",
            "[TOOL_CALLS][{\"name\": \"f\", \"arguments\": {}, \"id\": \"abcdefghi\"}][TOOL_CALLS]f[CALL_ID]x[ARGS]{}",
            "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n```json\n{}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
            "<function=f>{}</function>all\né>>>f\n{}>>>python\nx",
            "<|START_THINKING|>é<|END_THINKING|><|START_ACTION|>[{\"tool_name\": \"f\"}]<|END_ACTION|>",
            "<|channel|>analysis<|message|>é<|end|><|start|>assistant to=functions.f<|channel|>commentary json<|message|>{}<|call|>",
            "<|tool_call|>[{\"name\": \"f\", \"arguments\": {}}]",
            "<|tool_calls_section_begin|><|tool_call_begin|>functions.f:0<|tool_call_argument_begin|>{}<|tool_call_end|>",
            "<tool_call>f\n<arg_key>a</arg_key>\n<arg_value>é</arg_value>\n</tool_call>",
        ];
        let formats = TEMPLATES.iter().map(|(_, f)| *f);
        for format in formats {
            for reply in replies {
                for (i, _) in reply.char_indices() {
                    format.parse_with_tools(&reply[..i], &weather_tools());
                    format.parse(&reply[i..]);
                }
            }
        }
    }

    #[test]
    fn literals_escape() {
        assert_eq!(gbnf_literal("a\"b\n"), r#""a\"b\n""#);
        assert_eq!(json_name_literal("f"), r#""\"f\"""#);
        assert_eq!(char_class(&['a', ']', '-'], true), r"[^a\]\-]");
    }

    #[test]
    fn schemas_share_one_grammar() {
        let mut g = Gbnf::default();
        let a =
            json!({"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]});
        let b =
            json!({"type": "object", "properties": {"x": {"type": "string"}}, "required": ["x"]});
        g.json("a", &a).unwrap();
        g.json("b", &b).unwrap();
        let gbnf = g.finish("\"a=\" a | \"b=\" b");
        assert!(accepts(&gbnf, r#"a={"x": 1}"#), "{gbnf}");
        assert!(accepts(&gbnf, r#"b={"x": "1"}"#));
        assert!(!accepts(&gbnf, r#"a={"x": "1"}"#));
        assert!(!accepts(&gbnf, r#"b={"x": 1}"#));
    }

    #[test]
    fn renaming_leaves_literals_classes_and_counts() {
        let renamed = HashMap::from([("a", "x".to_string()), ("0", "y".to_string())]);
        assert_eq!(
            rename_refs(r#"a{0,2} "a\"a" [a\]a] a-b ( a )"#, &renamed),
            r#"x{0,2} "a\"a" [a\]a] a-b ( x )"#
        );
    }

    #[test]
    fn a_schema_rule_cannot_take_a_format_rule_name() {
        // `$defs/call` gives the schema a rule named `call`, which the formats use too.
        let tools = [ToolSpec {
            name: "f".into(),
            parameters: json!({
                "type": "object",
                "$defs": {"call": {"type": "integer"}},
                "properties": {"n": {"$ref": "#/$defs/call"}},
                "required": ["n"],
            }),
        }];
        for (format, text) in [
            (
                Format::Hermes,
                "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"n\": 1}}\n</tool_call>",
            ),
            (Format::Mistral, "[TOOL_CALLS]f[ARGS]{\"n\": 1}"),
            (
                Format::KimiK2,
                "<|tool_calls_section_begin|><|tool_call_begin|>functions.f:0\
                 <|tool_call_argument_begin|>{\"n\": 1}<|tool_call_end|><|tool_calls_section_end|>",
            ),
        ] {
            let g = format.call_gbnf(&tools, true).unwrap();
            assert!(accepts(&g, text), "{format:?}\n{g}");
            assert_eq!(format.parse(text).tool_calls.len(), 1, "{format:?}");
        }
    }

    #[test]
    fn text_without_a_stop() {
        for stop in ["</parameter>", "aab", "<|end|>"] {
            let mut g = Gbnf::default();
            g.text_without("t", stop);
            let gbnf = g.finish("t \"#\"");
            for text in [
                "",
                "abc",
                "</param",
                "<</parameter",
                "aa",
                "aaba",
                "<|end|",
                "x<y",
            ] {
                let ok = !text.contains(stop);
                assert_eq!(
                    accepts(&gbnf, &format!("{text}#")),
                    ok,
                    "{stop} {text}\n{gbnf}"
                );
            }
            assert!(!accepts(&gbnf, &format!("x{stop}y#")));
            assert!(!accepts(&gbnf, &format!("{}{stop}#", &stop[..1])));
        }
    }

    #[test]
    fn the_formats_refuse_an_empty_tool_list() {
        assert!(Format::Hermes.call_gbnf(&[], false).is_err());
    }
}
