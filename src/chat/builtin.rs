//! Chat formats selectable by name with `--chat-template NAME`, as llama.cpp offers, written
//! here as Jinja for the same renderer the models' own templates use. A system message is kept
//! where the format has a place for one and folded into the first user turn where it has not.

/// `(name, Jinja source)` for every built-in format.
pub const BUILTIN: &[(&str, &str)] = &[
    ("chatml", super::template::CHATML),
    (
        "llama2",
        "{%- set ns = namespace(sys='') -%}\
{%- for m in messages -%}\
{%- if m.role == 'system' -%}{%- set ns.sys = m.content -%}\
{%- elif m.role == 'user' -%}\
{{- bos_token + '[INST] ' -}}\
{%- if ns.sys -%}{{- '<<SYS>>\\n' + ns.sys + '\\n<</SYS>>\\n\\n' -}}{%- set ns.sys = '' -%}{%- endif -%}\
{{- m.content + ' [/INST]' -}}\
{%- else -%}{{- ' ' + m.content + ' ' + eos_token -}}\
{%- endif -%}\
{%- endfor -%}",
    ),
    (
        "llama3",
        "{{- bos_token -}}\
{%- for m in messages -%}\
{{- '<|start_header_id|>' + m.role + '<|end_header_id|>\\n\\n' + m.content | trim + '<|eot_id|>' -}}\
{%- endfor -%}\
{%- if add_generation_prompt -%}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' -}}{%- endif -%}",
    ),
    (
        "gemma",
        "{{- bos_token -}}\
{%- set ns = namespace(sys='') -%}\
{%- for m in messages -%}\
{%- if m.role == 'system' -%}{%- set ns.sys = m.content + '\\n\\n' -%}\
{%- else -%}\
{%- set role = 'model' if m.role == 'assistant' else m.role -%}\
{{- '<start_of_turn>' + role + '\\n' + ns.sys + m.content | trim + '<end_of_turn>\\n' -}}\
{%- set ns.sys = '' -%}\
{%- endif -%}\
{%- endfor -%}\
{%- if add_generation_prompt -%}{{- '<start_of_turn>model\\n' -}}{%- endif -%}",
    ),
    (
        "phi3",
        "{%- for m in messages -%}\
{{- '<|' + m.role + '|>\\n' + m.content + '<|end|>\\n' -}}\
{%- endfor -%}\
{%- if add_generation_prompt -%}{{- '<|assistant|>\\n' -}}{%- endif -%}",
    ),
    (
        "zephyr",
        "{%- for m in messages -%}\
{{- '<|' + m.role + '|>\\n' + m.content + '</s>\\n' -}}\
{%- endfor -%}\
{%- if add_generation_prompt -%}{{- '<|assistant|>\\n' -}}{%- endif -%}",
    ),
    (
        "vicuna",
        "{%- for m in messages -%}\
{%- if m.role == 'system' -%}{{- m.content + '\\n\\n' -}}\
{%- elif m.role == 'user' -%}{{- 'USER: ' + m.content + '\\n' -}}\
{%- else -%}{{- 'ASSISTANT: ' + m.content + '</s>\\n' -}}\
{%- endif -%}\
{%- endfor -%}\
{%- if add_generation_prompt -%}{{- 'ASSISTANT:' -}}{%- endif -%}",
    ),
    (
        "deepseek",
        "{%- for m in messages -%}\
{%- if m.role == 'system' -%}{{- m.content + '\\n\\n' -}}\
{%- elif m.role == 'user' -%}{{- '### Instruction:\\n' + m.content + '\\n' -}}\
{%- else -%}{{- '### Response:\\n' + m.content + '\\n<|EOT|>\\n' -}}\
{%- endif -%}\
{%- endfor -%}\
{%- if add_generation_prompt -%}{{- '### Response:\\n' -}}{%- endif -%}",
    ),
    (
        "mistral-v7",
        "{%- for m in messages -%}\
{%- if m.role == 'system' -%}{{- '[SYSTEM_PROMPT] ' + m.content + '[/SYSTEM_PROMPT]' -}}\
{%- elif m.role == 'user' -%}{{- '[INST] ' + m.content + '[/INST]' -}}\
{%- else -%}{{- ' ' + m.content + eos_token -}}\
{%- endif -%}\
{%- endfor -%}",
    ),
];

/// The Jinja source of the built-in format `name`.
pub fn builtin(name: &str) -> Option<&'static str> {
    BUILTIN.iter().find(|(n, _)| *n == name).map(|(_, s)| *s)
}

/// The built-in names, comma-separated (for error messages and `--help`).
pub fn names() -> String {
    BUILTIN
        .iter()
        .map(|(n, _)| *n)
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chat::{ChatTemplate, Message};

    fn render(name: &str, with_system: bool) -> String {
        let t = ChatTemplate::new(builtin(name).unwrap(), "<s>", "</s>").unwrap();
        let mut msgs = Vec::new();
        if with_system {
            msgs.push(Message::new("system", "Be brief."));
        }
        msgs.push(Message::new("user", "Hi"));
        msgs.push(Message::new("assistant", "Hello!"));
        msgs.push(Message::new("user", "Name a color."));
        t.render(&msgs, true).unwrap()
    }

    #[test]
    fn every_format_renders_a_conversation() {
        let want = [
            ("chatml", "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello!<|im_end|>\n<|im_start|>user\nName a color.<|im_end|>\n<|im_start|>assistant\n"),
            ("llama2", "<s>[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nHi [/INST] Hello! </s><s>[INST] Name a color. [/INST]"),
            ("llama3", "<s><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nHello!<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nName a color.<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"),
            ("gemma", "<s><start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n<start_of_turn>model\nHello!<end_of_turn>\n<start_of_turn>user\nName a color.<end_of_turn>\n<start_of_turn>model\n"),
            ("phi3", "<|system|>\nBe brief.<|end|>\n<|user|>\nHi<|end|>\n<|assistant|>\nHello!<|end|>\n<|user|>\nName a color.<|end|>\n<|assistant|>\n"),
            ("zephyr", "<|system|>\nBe brief.</s>\n<|user|>\nHi</s>\n<|assistant|>\nHello!</s>\n<|user|>\nName a color.</s>\n<|assistant|>\n"),
            ("vicuna", "Be brief.\n\nUSER: Hi\nASSISTANT: Hello!</s>\nUSER: Name a color.\nASSISTANT:"),
            ("deepseek", "Be brief.\n\n### Instruction:\nHi\n### Response:\nHello!\n<|EOT|>\n### Instruction:\nName a color.\n### Response:\n"),
            ("mistral-v7", "[SYSTEM_PROMPT] Be brief.[/SYSTEM_PROMPT][INST] Hi[/INST] Hello!</s>[INST] Name a color.[/INST]"),
        ];
        assert_eq!(want.len(), BUILTIN.len());
        for (name, text) in want {
            assert_eq!(render(name, true), text, "{name}");
        }
        assert!(!render("llama2", false).contains("<<SYS>>"));
    }

    #[test]
    fn unknown_names_are_none() {
        assert!(builtin("chatml").is_some());
        assert!(builtin("{{ x }}").is_none());
        assert!(names().starts_with("chatml, llama2"));
    }
}
