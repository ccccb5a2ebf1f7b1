//! Reading a chat reply as it streams: thoughts (`<think>...</think>`) go apart as reasoning
//! (see `chat::reasoning`); then, when the request gave tools, text that may begin a tool call
//! (a trigger of the template's format, or the start of one at the end of the text so far) is
//! held back, and the finished reply is parsed into content and calls. Without tools the
//! answer passes through as content.

use crate::chat::reasoning::{Split, ThinkSplitter};
use crate::chat::tool_call::{Format, Reply, ToolSpec};

/// One reply being read: its thoughts, then its answer's calls.
#[derive(Clone, Debug)]
pub struct ReplyReader {
    think: ThinkSplitter,
    /// Every thought so far.
    reasoning: String,
    calls: CallReader,
}

/// A finished reply: thoughts, content and calls.
#[derive(Clone, Debug, Default)]
pub struct Finished {
    pub reasoning: String,
    pub reply: Reply,
}

impl ReplyReader {
    /// A reader of thoughts as `think` splits them, and of calls of `tools` in `format`.
    pub fn new(think: ThinkSplitter, format: Option<Format>, tools: Vec<ToolSpec>) -> ReplyReader {
        let mut calls = CallReader::new(format);
        calls.tools = tools;
        ReplyReader {
            think,
            reasoning: String::new(),
            calls,
        }
    }

    /// Adds newly generated `text`; returns the thoughts and content that can go out now.
    pub fn push(&mut self, text: &str) -> Split {
        let split = self.think.push(text);
        self.reasoning.push_str(&split.reasoning);
        Split {
            content: self.calls.push(&split.content),
            reasoning: split.reasoning,
        }
    }

    /// The whole reply, and what of it did not go out yet.
    pub fn finish(&mut self) -> (Finished, Split) {
        let last = self.think.finish();
        self.reasoning.push_str(&last.reasoning);
        let mut content = self.calls.push(&last.content);
        let (reply, rest) = self.calls.finish();
        content.push_str(&rest);
        let finished = Finished {
            reasoning: self.reasoning.trim_end().to_string(),
            reply,
        };
        let split = Split {
            reasoning: last.reasoning,
            content,
        };
        (finished, split)
    }
}

/// The answer part of a reply, read for tool calls.
#[derive(Clone, Debug)]
struct CallReader {
    /// The tool-call format to read (`None`: the reply is all content).
    format: Option<Format>,
    full: String,
    /// Bytes of `full` already handed out as content.
    sent: usize,
    /// A call may have begun at `sent`: nothing more goes out until the end.
    holding: bool,
    /// The request's tools (some formats read argument values by their schemas).
    tools: Vec<ToolSpec>,
}

impl CallReader {
    fn new(format: Option<Format>) -> CallReader {
        CallReader {
            format,
            full: String::new(),
            sent: 0,
            holding: false,
            tools: Vec::new(),
        }
    }

    /// Adds newly generated `text`; returns the part that can go out as content now.
    fn push(&mut self, text: &str) -> String {
        self.full.push_str(text);
        let Some(format) = self.format else {
            self.sent = self.full.len();
            return text.to_string();
        };
        if self.holding {
            return String::new();
        }
        let triggers = format.triggers();
        if triggers.is_empty() {
            // The format's calls can only be told apart from text once the reply is whole.
            self.holding = true;
            return String::new();
        }
        let pending = &self.full[self.sent..];
        let start = self.sent;
        if let Some(at) = triggers.iter().filter_map(|t| pending.find(t)).min() {
            self.holding = true;
            self.sent = start + at;
            return pending[..at].to_string();
        }
        // Keep back the longest tail that could still grow into a trigger.
        let keep = pending
            .char_indices()
            .map(|(i, _)| i)
            .find(|&i| triggers.iter().any(|t| t.starts_with(&pending[i..])))
            .map_or(0, |i| pending.len() - i);
        let out = pending[..pending.len() - keep].to_string();
        self.sent = start + out.len();
        out
    }

    /// The whole reply read, and the content not handed out yet (text after the calls, held
    /// text that turned out not to be a call, or the answer inside the generic format's JSON).
    fn finish(&self) -> (Reply, String) {
        let Some(format) = self.format else {
            return (Reply::text(&self.full), self.full[self.sent..].to_string());
        };
        let reply = format.parse_with_tools(&self.full, &self.tools);
        let rest = if reply.content == self.full {
            self.full[self.sent..].to_string()
        } else {
            // The format took calls (or a JSON wrapper) out: what is left of its content past
            // what went out already.
            let sent = self.full[..self.sent].trim_end();
            reply
                .content
                .strip_prefix(sent)
                .unwrap_or_default()
                .to_string()
        };
        (reply, rest)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stream(format: Option<Format>, pieces: &[&str]) -> (String, Reply, String) {
        let mut r = CallReader::new(format);
        let mut out = String::new();
        for p in pieces {
            out.push_str(&r.push(p));
        }
        let (reply, rest) = r.finish();
        (out, reply, rest)
    }

    #[test]
    fn text_before_a_call_streams_and_the_call_is_held() {
        let (sent, reply, rest) = stream(
            Some(Format::Hermes),
            &[
                "Let me ",
                "check.\n<tool",
                "_call>\n{\"name\": \"f\", ",
                "\"arguments\": {}}\n</tool_call>",
            ],
        );
        assert_eq!(sent, "Let me check.\n");
        assert_eq!(reply.tool_calls.len(), 1);
        assert_eq!(rest, "");
    }

    #[test]
    fn a_false_start_is_let_go() {
        let (sent, reply, rest) = stream(Some(Format::Hermes), &["a <to", "ol> b"]);
        assert_eq!(sent, "a <tool> b");
        assert_eq!((reply.content.as_str(), rest.as_str()), ("a <tool> b", ""));
    }

    #[test]
    fn a_malformed_call_comes_out_at_the_end() {
        let (sent, reply, rest) = stream(Some(Format::Hermes), &["x <tool_call> not json"]);
        assert_eq!(sent, "x ");
        assert!(reply.tool_calls.is_empty());
        assert_eq!(rest, "<tool_call> not json");
    }

    #[test]
    fn without_tools_everything_streams() {
        let (sent, _, rest) = stream(None, &["<tool_call>", " hi"]);
        assert_eq!((sent.as_str(), rest.as_str()), ("<tool_call> hi", ""));
    }

    #[test]
    fn the_generic_format_is_read_whole() {
        let (sent, reply, rest) = stream(Some(Format::Generic), &["{\"response\": ", "\"hi\"}"]);
        assert_eq!(sent, "");
        assert_eq!(reply.content, "hi");
        assert!(reply.tool_calls.is_empty());
        assert_eq!(rest, "hi");
    }

    #[test]
    fn thoughts_then_a_call() {
        use crate::chat::reasoning::ReasoningFormat;
        let think = ThinkSplitter::new(ReasoningFormat::Deepseek, false);
        let mut r = ReplyReader::new(think, Some(Format::Hermes), Vec::new());
        let mut out = Split::default();
        for p in [
            "<think>\nI need",
            " the weather.</think>\n",
            "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>",
        ] {
            let s = r.push(p);
            out.reasoning.push_str(&s.reasoning);
            out.content.push_str(&s.content);
        }
        let (done, rest) = r.finish();
        assert_eq!(out.reasoning, "I need the weather.");
        assert_eq!(out.content, "");
        assert_eq!(rest, Split::default());
        assert_eq!(done.reasoning, "I need the weather.");
        assert_eq!(done.reply.tool_calls.len(), 1);
    }
}
