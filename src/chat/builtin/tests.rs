//! Every built-in format against the text llama.cpp's `llm_chat_apply_template` writes for the
//! same conversation, worked out by hand from its C++: the contents carry stray whitespace
//! (a system prompt ending in a newline, a reply padded with spaces) so that each format's
//! trimming, or its absence, shows.

use super::*;
use crate::chat::{ChatTemplate, Message};

fn render(name: &str, messages: &[Message], add_generation_prompt: bool) -> String {
    let source = builtin(name).unwrap_or_else(|| panic!("{name} is not built in"));
    let t = ChatTemplate::in_process(source, "<BOS>", "<EOS>")
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    t.render(messages, add_generation_prompt)
        .unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// A system prompt, a user turn, a reply, and a second user turn.
fn conversation() -> Vec<Message> {
    vec![
        Message::new("system", "Be brief.\n"),
        Message::new("user", "Hi"),
        Message::new("assistant", " Hello! "),
        Message::new("user", "Name a color."),
    ]
}

/// `(name, the conversation rendered with the assistant's opening)` for every name.
const WANT: &[(&str, &str)] = &[
    ("bailing", "<role>SYSTEM</role>Be brief.\n<role>HUMAN</role>Hi<role>ASSISTANT</role> Hello! <role>HUMAN</role>Name a color.<role>ASSISTANT</role>"),
    ("bailing-think", "<role>SYSTEM</role>Be brief.\n<role>HUMAN</role>Hi<role>ASSISTANT</role> Hello! <role>HUMAN</role>Name a color.<role>ASSISTANT</role><think>"),
    ("bailing2", "<role>SYSTEM</role>Be brief.\n<|role_end|><role>HUMAN</role>Hi<|role_end|><role>ASSISTANT</role> Hello! <|role_end|><role>HUMAN</role>Name a color.<|role_end|><role>ASSISTANT</role>"),
    ("chatglm3", "[gMASK]sop<|system|>\n Be brief.\n<|user|>\n Hi<|assistant|>\n  Hello! <|user|>\n Name a color.<|assistant|>"),
    ("chatglm4", "[gMASK]<sop><|system|>\nBe brief.\n<|user|>\nHi<|assistant|>\n Hello! <|user|>\nName a color.<|assistant|>\n"),
    ("chatml", "<|im_start|>system\nBe brief.\n<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n Hello! <|im_end|>\n<|im_start|>user\nName a color.<|im_end|>\n<|im_start|>assistant\n"),
    ("command-r", "<|START_OF_TURN_TOKEN|><|SYSTEM_TOKEN|>Be brief.<|END_OF_TURN_TOKEN|><|START_OF_TURN_TOKEN|><|USER_TOKEN|>Hi<|END_OF_TURN_TOKEN|><|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>Hello!<|END_OF_TURN_TOKEN|><|START_OF_TURN_TOKEN|><|USER_TOKEN|>Name a color.<|END_OF_TURN_TOKEN|><|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>"),
    ("deepseek", "Be brief.\n### Instruction:\nHi\n### Response:\n Hello! \n<|EOT|>\n### Instruction:\nName a color.\n### Response:\n"),
    ("deepseek-ocr", "Be brief.\nHi Hello! Name a color."),
    ("deepseek2", "Be brief.\n\n\nUser: Hi\n\nAssistant:  Hello! <｜end▁of▁sentence｜>User: Name a color.\n\nAssistant:"),
    ("deepseek3", "Be brief.\n\n\n<｜User｜>Hi<｜Assistant｜> Hello! <｜end▁of▁sentence｜><｜User｜>Name a color.<｜Assistant｜>"),
    ("exaone-moe", "<|system|>\nBe brief.<|endofturn|>\n<|user|>\nHi<|endofturn|>\n<|assistant|>\nHello!<|endofturn|>\n<|user|>\nName a color.<|endofturn|>\n<|assistant|>\n"),
    ("exaone3", "[|system|]Be brief.[|endofturn|]\n[|user|]Hi\n[|assistant|]Hello![|endofturn|]\n[|user|]Name a color.\n[|assistant|]"),
    ("exaone4", "[|system|]Be brief.[|endofturn|]\n[|user|]Hi\n[|assistant|]Hello![|endofturn|]\n[|user|]Name a color.\n[|assistant|]"),
    ("falcon3", "<|system|>\nBe brief.\n\n<|user|>\nHi\n<|assistant|>\n Hello! \n<|user|>\nName a color.\n<|assistant|>\n"),
    ("gemma", "<start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n<start_of_turn>model\nHello!<end_of_turn>\n<start_of_turn>user\nName a color.<end_of_turn>\n<start_of_turn>model\n"),
    ("gigachat", "<s>Be brief.\n<|message_sep|>user<|role_sep|>Hi<|message_sep|>available functions<|role_sep|>[]<|message_sep|>assistant<|role_sep|> Hello! <|message_sep|>user<|role_sep|>Name a color.<|message_sep|>available functions<|role_sep|>[]<|message_sep|>assistant<|role_sep|>"),
    ("glmedge", "<|system|>\nBe brief.\n<|user|>\nHi<|assistant|>\n Hello! <|user|>\nName a color.<|assistant|>"),
    ("gpt-oss", "<|start|>system<|message|>Be brief.\n<|end|><|start|>user<|message|>Hi<|end|><|start|>assistant<|message|> Hello! <|return|><|start|>user<|message|>Name a color.<|end|><|start|>assistant"),
    ("granite", "<|start_of_role|>system<|end_of_role|>Be brief.\n<|end_of_text|>\n<|start_of_role|>user<|end_of_role|>Hi<|end_of_text|>\n<|start_of_role|>assistant<|end_of_role|> Hello! <|end_of_text|>\n<|start_of_role|>user<|end_of_role|>Name a color.<|end_of_text|>\n<|start_of_role|>assistant<|end_of_role|>"),
    ("granite-4.0", "<|start_of_role|>system<|end_of_role|>Be brief.\n<|end_of_text|>\n<|start_of_role|>user<|end_of_role|>Hi<|end_of_text|>\n<|start_of_role|>assistant<|end_of_role|> Hello! <|end_of_text|>\n<|start_of_role|>user<|end_of_role|>Name a color.<|end_of_text|>\n<|start_of_role|>assistant<|end_of_role|>"),
    ("granite-4.1", "<|start_of_role|>system<|end_of_role|>Be brief.\n<|end_of_text|>\n<|start_of_role|>user<|end_of_role|>Hi<|end_of_text|>\n<|start_of_role|>assistant<|end_of_role|> Hello! <|end_of_text|>\n<|start_of_role|>user<|end_of_role|>Name a color.<|end_of_text|>\n<|start_of_role|>assistant<|end_of_role|>"),
    ("grok-2", "System: Be brief.<|separator|>\n\nHuman: Hi<|separator|>\n\nAssistant:  Hello! <|separator|>\n\nHuman: Name a color.<|separator|>\n\nAssistant:"),
    ("hunyuan-dense", "Be brief.\n<｜hy_place▁holder▁no▁3｜><｜hy_User｜>Hi<｜hy_Assistant｜><｜hy_Assistant｜> Hello! <｜hy_place▁holder▁no▁2｜><｜hy_User｜>Name a color.<｜hy_Assistant｜>"),
    ("hunyuan-moe", "<|startoftext|>Be brief.\n<|extra_4|><|startoftext|>Hi<|extra_0|> Hello! <|eos|><|startoftext|>Name a color.<|extra_0|>"),
    ("hunyuan-vl", "<｜hy_begin▁of▁sentence｜>Be brief.\n<｜hy_place▁holder▁no▁3｜>Hi<｜hy_User｜> Hello! <｜hy_Assistant｜>Name a color.<｜hy_User｜>"),
    ("kimi-k2", "<|im_system|>system<|im_middle|>Be brief.\n<|im_end|><|im_user|>user<|im_middle|>Hi<|im_end|><|im_assistant|>assistant<|im_middle|> Hello! <|im_end|><|im_user|>user<|im_middle|>Name a color.<|im_end|><|im_assistant|>assistant<|im_middle|>"),
    ("llama2", "[INST] Be brief.\n\nHi [/INST] Hello! </s>[INST] Name a color. [/INST]"),
    ("llama2-sys", "[INST] <<SYS>>\nBe brief.\n\n<</SYS>>\n\nHi [/INST] Hello! </s>[INST] Name a color. [/INST]"),
    ("llama2-sys-bos", "[INST] <<SYS>>\nBe brief.\n\n<</SYS>>\n\nHi [/INST] Hello! </s><s>[INST] Name a color. [/INST]"),
    ("llama2-sys-strip", "[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nHi [/INST]Hello!</s>[INST] Name a color. [/INST]"),
    ("llama3", "<|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nHello!<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nName a color.<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"),
    ("llama4", "<|header_start|>system<|header_end|>\n\nBe brief.<|eot|><|header_start|>user<|header_end|>\n\nHi<|eot|><|header_start|>assistant<|header_end|>\n\nHello!<|eot|><|header_start|>user<|header_end|>\n\nName a color.<|eot|><|header_start|>assistant<|header_end|>\n\n"),
    ("megrez", "<|role_start|>system<|role_end|>Be brief.\n<|turn_end|><|role_start|>user<|role_end|>Hi<|turn_end|><|role_start|>assistant<|role_end|> Hello! <|turn_end|><|role_start|>user<|role_end|>Name a color.<|turn_end|><|role_start|>assistant<|role_end|>"),
    ("minicpm", "Be brief.<用户>Hi<AI>Hello!<用户>Name a color.<AI>"),
    ("mistral-v1", " [INST] Be brief.\n\n\nHi [/INST]  Hello! </s> [INST] Name a color. [/INST]"),
    ("mistral-v3", "[INST] Be brief.\n\n\nHi[/INST] Hello!</s>[INST] Name a color.[/INST]"),
    ("mistral-v3-tekken", "[INST]Be brief.\n\n\nHi[/INST] Hello! </s>[INST]Name a color.[/INST]"),
    ("mistral-v7", "[SYSTEM_PROMPT] Be brief.\n[/SYSTEM_PROMPT][INST] Hi[/INST]  Hello! </s>[INST] Name a color.[/INST]"),
    ("mistral-v7-tekken", "[SYSTEM_PROMPT]Be brief.\n[/SYSTEM_PROMPT][INST]Hi[/INST] Hello! </s>[INST]Name a color.[/INST]"),
    ("monarch", "system\nBe brief.\n</s>\n<s>user\nHi</s>\n<s>assistant\n Hello! </s>\n<s>user\nName a color.</s>\n<s>assistant\n"),
    ("openchat", "Be brief.\n<|end_of_turn|>GPT4 Correct User: Hi<|end_of_turn|>GPT4 Correct Assistant:  Hello! <|end_of_turn|>GPT4 Correct User: Name a color.<|end_of_turn|>GPT4 Correct Assistant:"),
    ("orion", "Human: Be brief.\n\n\nHi\n\nAssistant: </s> Hello! </s>Human: Name a color.\n\nAssistant: </s>"),
    ("pangu-embedded", "[unused9]系统：Be brief.\n[unused10][unused9]用户：Hi[unused10][unused9]助手： Hello! [unused10][unused9]用户：Name a color.[unused10][unused9]助手："),
    ("phi3", "<|system|>\nBe brief.\n<|end|>\n<|user|>\nHi<|end|>\n<|assistant|>\n Hello! <|end|>\n<|user|>\nName a color.<|end|>\n<|assistant|>\n"),
    ("phi4", "<|im_start|>system<|im_sep|>Be brief.\n<|im_end|><|im_start|>user<|im_sep|>Hi<|im_end|><|im_start|>assistant<|im_sep|> Hello! <|im_end|><|im_start|>user<|im_sep|>Name a color.<|im_end|><|im_start|>assistant<|im_sep|>"),
    ("rwkv-world", "System: Be brief.\n\nUser: Hi\n\nAssistant: Hello!\n\nUser: Name a color.\n\nAssistant:"),
    ("seed_oss", "<seed:bos>system\nBe brief.\n<seed:eos><seed:bos>user\nHi<seed:eos><seed:bos>assistant\nHello!<seed:eos><seed:bos>user\nName a color.<seed:eos><seed:bos>assistant\n"),
    ("smolvlm", "<|im_start|>Be brief.\n\n\nUser: Hi<end_of_utterance>\nAssistant:  Hello! <end_of_utterance>\nUser: Name a color.<end_of_utterance>\nAssistant:"),
    ("solar-open", "<|begin|>system<|content|>Be brief.\n<|end|><|begin|>user<|content|>Hi<|end|><|begin|>assistant<|content|> Hello! <|end|><|begin|>user<|content|>Name a color.<|end|><|begin|>assistant"),
    ("vicuna", "Be brief.\n\n\nUSER: Hi\nASSISTANT:  Hello! </s>\nUSER: Name a color.\nASSISTANT:"),
    ("vicuna-orca", "SYSTEM: Be brief.\n\nUSER: Hi\nASSISTANT:  Hello! </s>\nUSER: Name a color.\nASSISTANT:"),
    ("yandex", " Пользователь: Hi\n\n Ассистент:  Hello! \n\n Пользователь: Name a color.\n\n Ассистент:[SEP]"),
    ("zephyr", "<|system|>\nBe brief.\n<|endoftext|>\n<|user|>\nHi<|endoftext|>\n<|assistant|>\n Hello! <|endoftext|>\n<|user|>\nName a color.<|endoftext|>\n<|assistant|>\n"),
];

#[test]
fn every_format_renders_a_conversation_as_llama_cpp_does() {
    let names: Vec<&str> = WANT.iter().map(|(n, _)| *n).collect();
    assert_eq!(
        names.join(", "),
        super::names(),
        "a name without an expectation"
    );
    let mut failed = Vec::new();
    for (name, want) in WANT {
        let got = render(name, &conversation(), true);
        if got != *want {
            failed.push(format!("{name}:\n  got  {got:?}\n  want {want:?}"));
        }
    }
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}

/// The turns some formats add or leave out depending on where the system prompt is, and
/// whether the assistant's opening was asked for.
#[test]
fn formats_without_a_system_prompt_or_an_opening() {
    let talk = vec![
        Message::new("user", " Hi "),
        Message::new("assistant", "Hello!"),
        Message::new("user", "Bye"),
    ];
    let want = [
        ("bailing2", "<role>SYSTEM</role>detailed thinking off<|role_end|><role>HUMAN</role> Hi <|role_end|><role>ASSISTANT</role>Hello!<|role_end|><role>HUMAN</role>Bye<|role_end|>"),
        ("pangu-embedded", "[unused9]系统：[unused10][unused9]用户： Hi [unused10][unused9]助手：Hello![unused10][unused9]用户：Bye[unused10]"),
        ("gigachat", "<s>user<|role_sep|> Hi <|message_sep|>available functions<|role_sep|>[]<|message_sep|>assistant<|role_sep|>Hello!<|message_sep|>user<|role_sep|>Bye<|message_sep|>available functions<|role_sep|>[]<|message_sep|>"),
        // The reply's opening follows the last user turn whether asked for or not.
        ("rwkv-world", "User: Hi\n\nAssistant: Hello!\n\nUser: Bye\n\nAssistant:"),
        ("llama2-sys-strip", "[INST] Hi [/INST]Hello!</s>[INST] Bye [/INST]"),
        ("gemma", "<start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\nHello!<end_of_turn>\n<start_of_turn>user\nBye<end_of_turn>\n"),
        ("hunyuan-dense", "<｜hy_User｜> Hi <｜hy_Assistant｜><｜hy_Assistant｜>Hello!<｜hy_place▁holder▁no▁2｜><｜hy_User｜>Bye<｜hy_Assistant｜>"),
        ("monarch", "user\n Hi </s>\n<s>assistant\nHello!</s>\n<s>user\nBye</s>\n"),
    ];
    for (name, text) in want {
        assert_eq!(render(name, &talk, false), text, "{name}");
    }
}

/// A second system prompt, a tool's answer and a role no format names: what each of a few
/// formats keeps of them.
#[test]
fn formats_with_unusual_turns() {
    let talk = vec![
        Message::new("system", "A"),
        Message::new("system", "B"),
        Message::new("user", "Q"),
        Message::new("tool", " 42 "),
        Message::new("critic", "C"),
    ];
    let want = [
        ("gemma", "<start_of_turn>user\nAB\n\nQ<end_of_turn>\n<start_of_turn>tool\n42<end_of_turn>\n<start_of_turn>critic\nC<end_of_turn>\n"),
        ("gigachat", "<s>A<|message_sep|>user<|role_sep|>Q<|message_sep|>available functions<|role_sep|>[]<|message_sep|>"),
        ("exaone3", "[|system|]A[|endofturn|]\n[|system|]B[|endofturn|]\n[|user|]Q\n"),
        ("exaone4", "[|system|]A[|endofturn|]\n[|system|]B[|endofturn|]\n[|user|]Q\n[|tool|]42[|endofturn|]\n"),
        ("kimi-k2", "<|im_system|>system<|im_middle|>A<|im_end|><|im_system|>system<|im_middle|>B<|im_end|><|im_user|>user<|im_middle|>Q<|im_end|><|im_system|>tool<|im_middle|> 42 <|im_end|>C<|im_end|>"),
        ("openchat", "A<|end_of_turn|>B<|end_of_turn|>GPT4 Correct User: Q<|end_of_turn|>GPT4 Correct Tool:  42 <|end_of_turn|>GPT4 Correct Critic: C<|end_of_turn|>"),
        ("bailing", "<role>SYSTEM</role>A<role>SYSTEM</role>B<role>HUMAN</role>Q<role>TOOL</role> 42 <role>CRITIC</role>C"),
        ("orion", "Human: AB\n\nQ\n\nAssistant: </s> 42 </s>C</s>"),
        ("hunyuan-vl", "<｜hy_begin▁of▁sentence｜>A<｜hy_place▁holder▁no▁3｜>Q<｜hy_User｜>"),
        ("pangu-embedded", "[unused9]系统：A[unused10][unused9]系统：B[unused10][unused9]用户：Q[unused10][unused9]工具： 42 [unused10]"),
    ];
    for (name, text) in want {
        assert_eq!(render(name, &talk, false), text, "{name}");
    }
}

/// llama.cpp's `trim` takes off C's six ASCII spaces and nothing else.
#[test]
fn trimming_is_ascii_whitespace_only() {
    let talk = [Message::new("user", "\u{a0}\t\x0b\x0cHi\r\n ")];
    assert_eq!(
        render("llama3", &talk, false),
        "<|start_header_id|>user<|end_header_id|>\n\n\u{a0}\t\x0b\x0cHi<|eot_id|>"
    );
    let talk = [Message::new("user", "\t\x0b\x0c Hi\r\n ")];
    assert_eq!(render("minicpm", &talk, false), "<用户>Hi<AI>");
}

#[test]
fn names_are_llama_cpps_sorted_list() {
    let names: Vec<&str> = FORMATS.iter().map(|(n, _)| *n).collect();
    let mut sorted = names.clone();
    sorted.sort_unstable();
    assert_eq!(names, sorted);
    assert_eq!(names.len(), 54);
    assert!(builtin("gpt-oss").is_some());
    assert!(builtin("dots1").is_none());
    assert!(builtin("{{ x }}").is_none());
    assert!(super::names().starts_with("bailing, bailing-think, bailing2, chatglm3"));
}
