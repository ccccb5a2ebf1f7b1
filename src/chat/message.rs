//! One turn of a conversation as chat templates see it: a role and its text, and for the turns
//! of an agent's loop, the function calls an assistant made (`tool_calls`) and which call a
//! tool's answer belongs to (`tool_call_id`). Serialized the way OpenAI's API and Hugging Face
//! templates shape them: `{"role", "content", "tool_calls": [{"id", "type": "function",
//! "function": {"name", "arguments"}}], ...}`, with the arguments as a JSON object (templates
//! write them out with `tojson`).

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// One turn of a conversation.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Message {
    pub role: String,
    pub content: String,
    /// The assistant's thinking before its answer, where the conversation kept it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<String>,
    /// Function calls an assistant turn made.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    /// A tool turn: the call it answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    /// A tool turn: the function that answered (some templates print it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Tool answers folded into the assistant turn that called them (`{"name", "response"}`),
    /// for templates that write them there (`chat::gemma4`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_responses: Vec<Value>,
}

impl Message {
    pub fn new(role: impl Into<String>, content: impl Into<String>) -> Message {
        Message {
            role: role.into(),
            content: content.into(),
            reasoning_content: None,
            tool_calls: Vec::new(),
            tool_call_id: None,
            name: None,
            tool_responses: Vec::new(),
        }
    }
}

/// A function call, in a conversation's history or in a model's reply.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    pub id: String,
    #[serde(rename = "type")]
    pub kind: String,
    pub function: FunctionCall,
}

impl ToolCall {
    /// A call of `name` with `arguments` (a JSON value, normally an object).
    pub fn function(id: impl Into<String>, name: impl Into<String>, arguments: Value) -> ToolCall {
        ToolCall {
            id: id.into(),
            kind: "function".to_string(),
            function: FunctionCall {
                name: name.into(),
                arguments,
            },
        }
    }
}

/// The function a call names and its arguments.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FunctionCall {
    pub name: String,
    pub arguments: Value,
}
