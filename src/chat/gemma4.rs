//! The older Gemma 4 chat templates (those without the "OpenAI Chat Completions" adapter) write a
//! call's results inside the model turn that made the call, from the assistant message's
//! `tool_responses`, not from `tool` messages. As llama.cpp does for them, the `tool` messages
//! after a calling turn are folded into it (each result named by its call, its content parsed
//! as JSON where it is JSON), together with a final answer that follows them; and a prompt that
//! ends after a closed turn gets the model's opening.

use super::message::Message;
use serde_json::{json, Value};

/// Whether `source` is an older Gemma 4 template that needs the folding.
pub fn needs_folding(source: &str) -> bool {
    source.contains("'<|tool_call>call:'") && !source.contains("{#- OpenAI Chat Completions:")
}

/// `messages` with each calling assistant turn taking its tool results (and the answer after
/// them).
pub fn fold_tool_responses(messages: &[Message]) -> Vec<Message> {
    let mut out = Vec::with_capacity(messages.len());
    let mut i = 0;
    while i < messages.len() {
        let m = &messages[i];
        i += 1;
        if m.role != "assistant" || m.tool_calls.is_empty() {
            out.push(m.clone());
            continue;
        }
        let mut turn = m.clone();
        while let Some(result) = messages.get(i).filter(|r| r.role == "tool") {
            let called = turn.tool_calls.get(turn.tool_responses.len());
            let name = match called.map(|c| c.function.name.clone()) {
                Some(n) if !n.is_empty() => n,
                _ => result.tool_call_id.clone().unwrap_or_default(),
            };
            let response = serde_json::from_str::<Value>(&result.content)
                .unwrap_or_else(|_| Value::String(result.content.clone()));
            turn.tool_responses
                .push(json!({"name": name, "response": response}));
            i += 1;
        }
        if let Some(answer) = messages
            .get(i)
            .filter(|a| a.role == "assistant" && a.tool_calls.is_empty() && !a.content.is_empty())
        {
            turn.content = answer.content.clone();
            i += 1;
        }
        out.push(turn);
    }
    out
}

/// The model's opening where the rendered prompt ends on a closed turn.
pub fn open_model_turn(prompt: &mut String) {
    if prompt.ends_with("<turn|>\n") {
        prompt.push_str("<|turn>model\n");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chat::ToolCall;

    #[test]
    fn results_and_the_answer_fold_into_the_calling_turn() {
        let mut call = Message::new("assistant", "");
        call.tool_calls = vec![
            ToolCall::function("1", "get_weather", json!({"city": "Paris"})),
            ToolCall::function("2", "get_time", json!({})),
        ];
        let msgs = vec![
            Message::new("user", "q"),
            call,
            Message::new("tool", "{\"t\": 18}"),
            Message::new("tool", "14:05"),
            Message::new("assistant", "Sunny, 2 pm."),
            Message::new("user", "thanks"),
        ];
        let folded = fold_tool_responses(&msgs);
        assert_eq!(folded.len(), 3);
        assert_eq!(
            folded[1].tool_responses,
            [
                json!({"name": "get_weather", "response": {"t": 18}}),
                json!({"name": "get_time", "response": "14:05"})
            ]
        );
        assert_eq!(folded[1].content, "Sunny, 2 pm.");
        assert_eq!(folded[2].content, "thanks");
        let mut p = "x<turn|>\n".to_string();
        open_model_turn(&mut p);
        assert_eq!(p, "x<turn|>\n<|turn>model\n");
    }
}
