//! The built-in chat formats, one Jinja template per name, sorted by name as llama.cpp lists
//! them. Each writes what llama.cpp's own C++ for that name (`llm_chat_apply_template`) writes:
//! the same markers, the same roles skipped, and the same trimming, where `trim(ws)` strips the
//! six ASCII spaces C's `isspace` knows (and no other character).

/// A template body with `ws` bound to the whitespace llama.cpp's `trim` removes.
macro_rules! fmt {
    ($body:expr) => {
        concat!("{%- set ws = ' \\t\\n\\x0b\\f\\r' -%}", $body)
    };
}

/// The Llama 2 family: `[INST]` turns; `$sys` is the opening and closing of a system turn,
/// `$again` what opens every turn after the first, `$strip` whether contents are trimmed.
macro_rules! llama2 {
    ($sys_open:literal, $sys_close:literal, $again:literal, $strip:literal) => {
        fmt!(concat!(
            r#"{{- '[INST] ' -}}
{%- set ns = namespace(inside=true) -%}
{%- for m in messages -%}
  {%- set c = m.content|trim(ws) if "#,
            $strip,
            r#" else m.content -%}
  {%- if not ns.inside -%}{%- set ns.inside = true -%}{{- '"#,
            $again,
            r#"' -}}{%- endif -%}
  {%- if m.role == 'system' -%}{{- '"#,
            $sys_open,
            r#"' + c + '"#,
            $sys_close,
            r#"' -}}
  {%- elif m.role == 'user' -%}{{- c + ' [/INST]' -}}
  {%- else -%}{{- c + '</s>' -}}{%- set ns.inside = false -%}
  {%- endif -%}
{%- endfor -%}"#
        ))
    };
}

/// Mistral v1 and v3: `$lead` goes before `[INST]` and `[/INST]`, `$space` after `[INST]` and
/// before a reply, `$trim` says whether replies are trimmed.
macro_rules! mistral {
    ($lead:literal, $space:literal, $trim:literal) => {
        fmt!(concat!(
            r#"{%- set ns = namespace(inside=false) -%}
{%- for m in messages -%}
  {%- if not ns.inside -%}{{- '"#,
            $lead,
            r#"[INST]"#,
            $space,
            r#"' -}}{%- set ns.inside = true -%}{%- endif -%}
  {%- if m.role == 'system' -%}{{- m.content + '\n\n' -}}
  {%- elif m.role == 'user' -%}{{- m.content + '"#,
            $lead,
            r#"[/INST]' -}}
  {%- else -%}
    {{- '"#,
            $space,
            r#"' + (m.content|trim(ws) if "#,
            $trim,
            r#" else m.content) + '</s>' -}}
    {%- set ns.inside = false -%}
  {%- endif -%}
{%- endfor -%}"#
        ))
    };
}

/// Mistral v7: system prompts in their own markers; `$space` after each opening marker.
macro_rules! mistral_v7 {
    ($space:literal) => {
        fmt!(concat!(
            r#"{%- for m in messages -%}
  {%- if m.role == 'system' -%}{{- '[SYSTEM_PROMPT]"#,
            $space,
            r#"' + m.content + '[/SYSTEM_PROMPT]' -}}
  {%- elif m.role == 'user' -%}{{- '[INST]"#,
            $space,
            r#"' + m.content + '[/INST]' -}}
  {%- else -%}{{- '"#,
            $space,
            r#"' + m.content + '</s>' -}}
  {%- endif -%}
{%- endfor -%}"#
        ))
    };
}

/// Vicuna: `$system` opens a system turn (Orca's variant names it), `$after` closes it.
macro_rules! vicuna {
    ($system:literal, $after:literal) => {
        fmt!(concat!(
            r#"{%- for m in messages -%}
  {%- if m.role == 'system' -%}{{- '"#,
            $system,
            r#"' + m.content + '"#,
            $after,
            r#"' -}}
  {%- elif m.role == 'user' -%}{{- 'USER: ' + m.content + '\n' -}}
  {%- elif m.role == 'assistant' -%}{{- 'ASSISTANT: ' + m.content + '</s>\n' -}}
  {%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- 'ASSISTANT:' -}}{%- endif -%}"#
        ))
    };
}

/// EXAONE 3 and 4: `[|role|]` markers, trimmed contents; `$tool` says whether tool turns show.
macro_rules! exaone {
    ($tool:literal) => {
        fmt!(concat!(
            r#"{%- for m in messages -%}
  {%- set c = m.content|trim(ws) -%}
  {%- if m.role == 'system' -%}{{- '[|system|]' + c + '[|endofturn|]\n' -}}
  {%- elif m.role == 'user' -%}{{- '[|user|]' + c + '\n' -}}
  {%- elif m.role == 'assistant' -%}{{- '[|assistant|]' + c + '[|endofturn|]\n' -}}
  {%- elif m.role == 'tool' and "#,
            $tool,
            r#" -%}{{- '[|tool|]' + c + '[|endofturn|]\n' -}}
  {%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- '[|assistant|]' -}}{%- endif -%}"#
        ))
    };
}

/// Granite: `<|start_of_role|>` markers; `$call` is how an `assistant_tool_call` turn opens.
macro_rules! granite {
    ($call:literal) => {
        fmt!(concat!(
            r#"{%- for m in messages -%}
  {%- if m.role == 'assistant_tool_call' -%}{{- '"#,
            $call,
            r#"' -}}
  {%- else -%}{{- '<|start_of_role|>' + m.role + '<|end_of_role|>' -}}
  {%- endif -%}
  {{- m.content + '<|end_of_text|>\n' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- '<|start_of_role|>assistant<|end_of_role|>' -}}{%- endif -%}"#
        ))
    };
}

/// Ling/Ring (Bailing): `<role>` markers with the role upper-cased (`user` is `HUMAN`); `$open`
/// follows the assistant's opening.
macro_rules! bailing {
    ($open:literal) => {
        fmt!(concat!(
            r#"{%- for m in messages -%}
  {{- '<role>' + ('HUMAN' if m.role == 'user' else m.role|upper) + '</role>' + m.content -}}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- '<role>ASSISTANT</role>"#,
            $open,
            r#"' -}}{%- endif -%}"#
        ))
    };
}

/// `(name, Jinja source)` for every name `--chat-template` knows besides a template.
pub const FORMATS: &[(&str, &str)] = &[
    ("bailing", bailing!("")),
    ("bailing-think", bailing!("<think>")),
    (
        "bailing2",
        fmt!(
            r#"{%- if not (messages and messages[0].role == 'system') -%}
  {{- '<role>SYSTEM</role>detailed thinking off<|role_end|>' -}}
{%- endif -%}
{%- for m in messages -%}
  {{- '<role>' + ('HUMAN' if m.role == 'user' else m.role|upper) + '</role>' + m.content + '<|role_end|>' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- '<role>ASSISTANT</role>' -}}{%- endif -%}"#
        ),
    ),
    (
        "chatglm3",
        fmt!(
            r#"{{- '[gMASK]sop' -}}
{%- for m in messages -%}{{- '<|' + m.role + '|>\n ' + m.content -}}{%- endfor -%}
{%- if add_generation_prompt -%}{{- '<|assistant|>' -}}{%- endif -%}"#
        ),
    ),
    (
        "chatglm4",
        fmt!(
            r#"{{- '[gMASK]<sop>' -}}
{%- for m in messages -%}{{- '<|' + m.role + '|>\n' + m.content -}}{%- endfor -%}
{%- if add_generation_prompt -%}{{- '<|assistant|>\n' -}}{%- endif -%}"#
        ),
    ),
    ("chatml", super::super::template::CHATML),
    (
        "command-r",
        fmt!(
            r#"{%- for m in messages -%}
  {%- set c = m.content|trim(ws) -%}
  {%- if m.role == 'system' -%}{{- '<|START_OF_TURN_TOKEN|><|SYSTEM_TOKEN|>' + c + '<|END_OF_TURN_TOKEN|>' -}}
  {%- elif m.role == 'user' -%}{{- '<|START_OF_TURN_TOKEN|><|USER_TOKEN|>' + c + '<|END_OF_TURN_TOKEN|>' -}}
  {%- elif m.role == 'assistant' -%}{{- '<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>' + c + '<|END_OF_TURN_TOKEN|>' -}}
  {%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- '<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>' -}}{%- endif -%}"#
        ),
    ),
    (
        "deepseek",
        fmt!(
            r#"{%- for m in messages -%}
  {%- if m.role == 'system' -%}{{- m.content -}}
  {%- elif m.role == 'user' -%}{{- '### Instruction:\n' + m.content + '\n' -}}
  {%- elif m.role == 'assistant' -%}{{- '### Response:\n' + m.content + '\n<|EOT|>\n' -}}
  {%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- '### Response:\n' -}}{%- endif -%}"#
        ),
    ),
    (
        "deepseek-ocr",
        fmt!(r#"{%- for m in messages -%}{{- m.content -}}{%- endfor -%}"#),
    ),
    (
        "deepseek2",
        fmt!(
            r#"{%- for m in messages -%}
  {%- if m.role == 'system' -%}{{- m.content + '\n\n' -}}
  {%- elif m.role == 'user' -%}{{- 'User: ' + m.content + '\n\n' -}}
  {%- elif m.role == 'assistant' -%}{{- 'Assistant: ' + m.content + '<｜end▁of▁sentence｜>' -}}
  {%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- 'Assistant:' -}}{%- endif -%}"#
        ),
    ),
    (
        "deepseek3",
        fmt!(
            r#"{%- for m in messages -%}
  {%- if m.role == 'system' -%}{{- m.content + '\n\n' -}}
  {%- elif m.role == 'user' -%}{{- '<｜User｜>' + m.content -}}
  {%- elif m.role == 'assistant' -%}{{- '<｜Assistant｜>' + m.content + '<｜end▁of▁sentence｜>' -}}
  {%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- '<｜Assistant｜>' -}}{%- endif -%}"#
        ),
    ),
    (
        "exaone-moe",
        fmt!(
            r#"{%- for m in messages -%}
  {%- if m.role in ['system', 'user', 'assistant', 'tool'] -%}
    {{- '<|' + m.role + '|>\n' + m.content|trim(ws) + '<|endofturn|>\n' -}}
  {%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- '<|assistant|>\n' -}}{%- endif -%}"#
        ),
    ),
    ("exaone3", exaone!("false")),
    ("exaone4", exaone!("true")),
    (
        "falcon3",
        fmt!(
            r#"{%- for m in messages -%}{{- '<|' + m.role + '|>\n' + m.content + '\n' -}}{%- endfor -%}
{%- if add_generation_prompt -%}{{- '<|assistant|>\n' -}}{%- endif -%}"#
        ),
    ),
    (
        "gemma",
        fmt!(
            r#"{%- set ns = namespace(sys='') -%}
{%- for m in messages -%}
  {%- if m.role == 'system' -%}{%- set ns.sys = ns.sys + m.content|trim(ws) -%}
  {%- else -%}
    {%- set role = 'model' if m.role == 'assistant' else m.role -%}
    {{- '<start_of_turn>' + role + '\n' -}}
    {%- if ns.sys and role != 'model' -%}{{- ns.sys + '\n\n' -}}{%- set ns.sys = '' -%}{%- endif -%}
    {{- m.content|trim(ws) + '<end_of_turn>\n' -}}
  {%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- '<start_of_turn>model\n' -}}{%- endif -%}"#
        ),
    ),
    (
        "gigachat",
        fmt!(
            r#"{%- set system = messages and messages[0].role == 'system' -%}
{{- '<s>' -}}{%- if system -%}{{- messages[0].content + '<|message_sep|>' -}}{%- endif -%}
{%- for m in (messages[1:] if system else messages) -%}
  {%- if m.role == 'user' -%}
    {{- 'user<|role_sep|>' + m.content + '<|message_sep|>available functions<|role_sep|>[]<|message_sep|>' -}}
  {%- elif m.role == 'assistant' -%}{{- 'assistant<|role_sep|>' + m.content + '<|message_sep|>' -}}
  {%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- 'assistant<|role_sep|>' -}}{%- endif -%}"#
        ),
    ),
    (
        "glmedge",
        fmt!(
            r#"{%- for m in messages -%}{{- '<|' + m.role + '|>\n' + m.content -}}{%- endfor -%}
{%- if add_generation_prompt -%}{{- '<|assistant|>' -}}{%- endif -%}"#
        ),
    ),
    (
        "gpt-oss",
        fmt!(
            r#"{%- for m in messages -%}
  {{- '<|start|>' + m.role + '<|message|>' + m.content -}}
  {{- '<|return|>' if m.role == 'assistant' else '<|end|>' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- '<|start|>assistant' -}}{%- endif -%}"#
        ),
    ),
    (
        "granite",
        granite!("<|start_of_role|>assistant_tool_call<|end_of_role|><|tool_call|>"),
    ),
    (
        "granite-4.0",
        granite!("<|start_of_role|>assistant<|end_of_role|><|tool_call|>"),
    ),
    (
        "granite-4.1",
        granite!("<|start_of_role|>assistant<|end_of_role|><|tool_call|>"),
    ),
    (
        "grok-2",
        fmt!(
            r#"{%- for m in messages -%}
  {%- if m.role == 'system' -%}{{- 'System: ' + m.content|trim(ws) + '<|separator|>\n\n' -}}
  {%- elif m.role == 'user' -%}{{- 'Human: ' + m.content|trim(ws) + '<|separator|>\n\n' -}}
  {%- elif m.role == 'assistant' -%}{{- 'Assistant: ' + m.content + '<|separator|>\n\n' -}}
  {%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- 'Assistant:' -}}{%- endif -%}"#
        ),
    ),
    (
        "hunyuan-dense",
        fmt!(
            r#"{%- for m in messages -%}
  {%- if loop.first and m.role == 'system' -%}{{- m.content + '<｜hy_place▁holder▁no▁3｜>' -}}{%- endif -%}
  {%- if m.role == 'assistant' -%}{{- '<｜hy_Assistant｜>' + m.content + '<｜hy_place▁holder▁no▁2｜>' -}}
  {%- elif m.role == 'user' -%}{{- '<｜hy_User｜>' + m.content + '<｜hy_Assistant｜>' -}}
  {%- endif -%}
{%- endfor -%}"#
        ),
    ),
    (
        "hunyuan-moe",
        fmt!(
            r#"{%- for m in messages -%}
  {%- if m.role == 'system' -%}{{- '<|startoftext|>' + m.content + '<|extra_4|>' -}}
  {%- elif m.role == 'assistant' -%}{{- m.content + '<|eos|>' -}}
  {%- else -%}{{- '<|startoftext|>' + m.content + '<|extra_0|>' -}}
  {%- endif -%}
{%- endfor -%}"#
        ),
    ),
    (
        "hunyuan-vl",
        fmt!(
            r#"{{- '<｜hy_begin▁of▁sentence｜>' -}}
{%- for m in messages -%}
  {%- if loop.first and m.role == 'system' -%}{{- m.content + '<｜hy_place▁holder▁no▁3｜>' -}}
  {%- elif m.role == 'user' -%}{{- m.content + '<｜hy_User｜>' -}}
  {%- elif m.role == 'assistant' -%}{{- m.content + '<｜hy_Assistant｜>' -}}
  {%- endif -%}
{%- endfor -%}"#
        ),
    ),
    (
        "kimi-k2",
        fmt!(
            r#"{%- for m in messages -%}
  {%- if m.role == 'system' -%}{{- '<|im_system|>system<|im_middle|>' -}}
  {%- elif m.role == 'user' -%}{{- '<|im_user|>user<|im_middle|>' -}}
  {%- elif m.role == 'assistant' -%}{{- '<|im_assistant|>assistant<|im_middle|>' -}}
  {%- elif m.role == 'tool' -%}{{- '<|im_system|>tool<|im_middle|>' -}}
  {%- endif -%}
  {{- m.content + '<|im_end|>' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- '<|im_assistant|>assistant<|im_middle|>' -}}{%- endif -%}"#
        ),
    ),
    ("llama2", llama2!("", "\n", "[INST] ", "false")),
    (
        "llama2-sys",
        llama2!("<<SYS>>\n", "\n<</SYS>>\n\n", "[INST] ", "false"),
    ),
    (
        "llama2-sys-bos",
        llama2!("<<SYS>>\n", "\n<</SYS>>\n\n", "<s>[INST] ", "false"),
    ),
    (
        "llama2-sys-strip",
        llama2!("<<SYS>>\n", "\n<</SYS>>\n\n", "[INST] ", "true"),
    ),
    (
        "llama3",
        fmt!(
            r#"{%- for m in messages -%}
  {{- '<|start_header_id|>' + m.role + '<|end_header_id|>\n\n' + m.content|trim(ws) + '<|eot_id|>' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- '<|start_header_id|>assistant<|end_header_id|>\n\n' -}}{%- endif -%}"#
        ),
    ),
    (
        "llama4",
        fmt!(
            r#"{%- for m in messages -%}
  {{- '<|header_start|>' + m.role + '<|header_end|>\n\n' + m.content|trim(ws) + '<|eot|>' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- '<|header_start|>assistant<|header_end|>\n\n' -}}{%- endif -%}"#
        ),
    ),
    (
        "megrez",
        fmt!(
            r#"{%- for m in messages -%}
  {{- '<|role_start|>' + m.role + '<|role_end|>' + m.content + '<|turn_end|>' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- '<|role_start|>assistant<|role_end|>' -}}{%- endif -%}"#
        ),
    ),
    (
        "minicpm",
        fmt!(
            r#"{%- for m in messages -%}
  {%- if m.role == 'user' -%}{{- '<用户>' + m.content|trim(ws) + '<AI>' -}}
  {%- else -%}{{- m.content|trim(ws) -}}
  {%- endif -%}
{%- endfor -%}"#
        ),
    ),
    ("mistral-v1", mistral!(" ", " ", "false")),
    ("mistral-v3", mistral!("", " ", "true")),
    ("mistral-v3-tekken", mistral!("", "", "false")),
    ("mistral-v7", mistral_v7!(" ")),
    ("mistral-v7-tekken", mistral_v7!("")),
    (
        "monarch",
        fmt!(
            r#"{%- for m in messages -%}
  {{- ('' if loop.first else '<s>') + m.role + '\n' + m.content + '</s>\n' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- '<s>assistant\n' -}}{%- endif -%}"#
        ),
    ),
    (
        "openchat",
        fmt!(
            r#"{%- for m in messages -%}
  {%- if m.role == 'system' -%}{{- m.content + '<|end_of_turn|>' -}}
  {%- else -%}{{- 'GPT4 Correct ' + m.role[:1]|upper + m.role[1:] + ': ' + m.content + '<|end_of_turn|>' -}}
  {%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- 'GPT4 Correct Assistant:' -}}{%- endif -%}"#
        ),
    ),
    (
        "orion",
        fmt!(
            r#"{%- set ns = namespace(sys='') -%}
{%- for m in messages -%}
  {%- if m.role == 'system' -%}{%- set ns.sys = ns.sys + m.content -%}
  {%- elif m.role == 'user' -%}
    {{- 'Human: ' -}}
    {%- if ns.sys -%}{{- ns.sys + '\n\n' -}}{%- set ns.sys = '' -%}{%- endif -%}
    {{- m.content + '\n\nAssistant: </s>' -}}
  {%- else -%}{{- m.content + '</s>' -}}
  {%- endif -%}
{%- endfor -%}"#
        ),
    ),
    (
        "pangu-embedded",
        fmt!(
            r#"{%- set names = {'system': '系统', 'user': '用户', 'assistant': '助手', 'tool': '工具', 'function': '方法'} -%}
{%- for m in messages -%}
  {%- if loop.first and m.role != 'system' -%}{{- '[unused9]系统：[unused10]' -}}{%- endif -%}
  {%- if m.role in names -%}{{- '[unused9]' + names[m.role] + '：' + m.content + '[unused10]' -}}{%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- '[unused9]助手：' -}}{%- endif -%}"#
        ),
    ),
    (
        "phi3",
        fmt!(
            r#"{%- for m in messages -%}{{- '<|' + m.role + '|>\n' + m.content + '<|end|>\n' -}}{%- endfor -%}
{%- if add_generation_prompt -%}{{- '<|assistant|>\n' -}}{%- endif -%}"#
        ),
    ),
    (
        "phi4",
        fmt!(
            r#"{%- for m in messages -%}{{- '<|im_start|>' + m.role + '<|im_sep|>' + m.content + '<|im_end|>' -}}{%- endfor -%}
{%- if add_generation_prompt -%}{{- '<|im_start|>assistant<|im_sep|>' -}}{%- endif -%}"#
        ),
    ),
    (
        "rwkv-world",
        fmt!(
            r#"{%- for m in messages -%}
  {%- if m.role == 'system' -%}{{- 'System: ' + m.content|trim(ws) + '\n\n' -}}
  {%- elif m.role == 'user' -%}
    {{- 'User: ' + m.content|trim(ws) + '\n\n' -}}
    {%- if loop.last -%}{{- 'Assistant:' -}}{%- endif -%}
  {%- elif m.role == 'assistant' -%}{{- 'Assistant: ' + m.content|trim(ws) + '\n\n' -}}
  {%- endif -%}
{%- endfor -%}"#
        ),
    ),
    (
        "seed_oss",
        fmt!(
            r#"{%- for m in messages -%}
  {{- '<seed:bos>' + m.role + '\n' + (m.content|trim(ws) if m.role == 'assistant' else m.content) + '<seed:eos>' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- '<seed:bos>assistant\n' -}}{%- endif -%}"#
        ),
    ),
    (
        "smolvlm",
        fmt!(
            r#"{{- '<|im_start|>' -}}
{%- for m in messages -%}
  {%- if m.role == 'system' -%}{{- m.content + '\n\n' -}}
  {%- elif m.role == 'user' -%}{{- 'User: ' + m.content + '<end_of_utterance>\n' -}}
  {%- else -%}{{- 'Assistant: ' + m.content + '<end_of_utterance>\n' -}}
  {%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- 'Assistant:' -}}{%- endif -%}"#
        ),
    ),
    (
        "solar-open",
        fmt!(
            r#"{%- for m in messages -%}{{- '<|begin|>' + m.role + '<|content|>' + m.content + '<|end|>' -}}{%- endfor -%}
{%- if add_generation_prompt -%}{{- '<|begin|>assistant' -}}{%- endif -%}"#
        ),
    ),
    ("vicuna", vicuna!("", "\n\n")),
    ("vicuna-orca", vicuna!("SYSTEM: ", "\n")),
    (
        "yandex",
        fmt!(
            r#"{%- for m in messages -%}
  {%- if m.role == 'user' -%}{{- ' Пользователь: ' + m.content + '\n\n' -}}
  {%- elif m.role == 'assistant' -%}{{- ' Ассистент: ' + m.content + '\n\n' -}}
  {%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- ' Ассистент:[SEP]' -}}{%- endif -%}"#
        ),
    ),
    (
        "zephyr",
        fmt!(
            r#"{%- for m in messages -%}{{- '<|' + m.role + '|>\n' + m.content + '<|endoftext|>\n' -}}{%- endfor -%}
{%- if add_generation_prompt -%}{{- '<|assistant|>\n' -}}{%- endif -%}"#
        ),
    ),
];
