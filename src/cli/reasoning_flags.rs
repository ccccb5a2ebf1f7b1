//! llama-server's reasoning flags that act here: where thoughts go (`--reasoning-format`),
//! whether templates think at all (`-rea/--reasoning`, and `--reasoning-budget 0`, which ends
//! thinking before it starts), how long a thought may run (`--reasoning-budget N`,
//! `--reasoning-budget-message`), and `--skip-chat-parsing` (replies are all content: no
//! reasoning or tool calls read out of them), and the variables every chat template is given
//! (`--chat-template-kwargs`, with `enable_thinking` from the flags above).

use clap::{ArgMatches, Args};

/// Reasoning flags this program acts on.
#[derive(Args, Debug, Clone)]
pub struct ReasoningArgs {
    /// Where thoughts (`<think>...</think>`) go: none (left in `content`), deepseek (into
    /// `reasoning_content`), deepseek-legacy (both), auto (= deepseek).
    #[arg(
        long = "reasoning-format",
        value_name = "FORMAT",
        default_value = "auto",
        value_parser = ["none", "deepseek", "deepseek-legacy", "auto"],
        env = "LLAMA_ARG_THINK"
    )]
    pub reasoning_format: String,

    /// Thinking in the chat: on, off (templates get enable_thinking = false), or auto (the
    /// template decides).
    #[arg(
        long = "reasoning",
        value_name = "on|off|auto",
        num_args = 0..=1,
        default_missing_value = "on",
        default_value = "auto",
        value_parser = ["on", "off", "auto"],
        env = "LLAMA_ARG_REASONING"
    )]
    pub reasoning: String,

    /// Token budget for thinking: -1 unrestricted, 0 no thinking (templates get
    /// enable_thinking = false, and a thought that opens anyway is closed at once), N > 0: a
    /// thought that reaches N tokens is closed (the message, then the end tag, are forced).
    #[arg(
        long = "reasoning-budget",
        value_name = "N",
        default_value_t = -1,
        allow_negative_numbers = true,
        env = "LLAMA_ARG_THINK_BUDGET"
    )]
    pub reasoning_budget: i64,

    /// Text forced before the end-of-thinking tag when the budget runs out.
    #[arg(
        long = "reasoning-budget-message",
        value_name = "MESSAGE",
        default_value = "",
        hide_default_value = true,
        env = "LLAMA_ARG_THINK_BUDGET_MESSAGE"
    )]
    pub reasoning_budget_message: String,

    /// Read nothing out of chat replies: reasoning and tool calls stay in `content`.
    #[arg(long = "skip-chat-parsing", overrides_with = "no_skip_chat_parsing")]
    pub skip_chat_parsing: bool,

    /// Read reasoning and tool calls out of chat replies (the default).
    #[arg(long = "no-skip-chat-parsing", overrides_with = "skip_chat_parsing")]
    pub no_skip_chat_parsing: bool,

    /// More variables for chat templates, a JSON object, e.g. '{"enable_thinking":false}'; a
    /// request's own `chat_template_kwargs` wins.
    #[arg(
        long = "chat-template-kwargs",
        value_name = "STRING",
        env = "LLAMA_ARG_CHAT_TEMPLATE_KWARGS"
    )]
    pub chat_template_kwargs: Option<String>,

    /// `--chat-template-kwargs` read ([`ReasoningArgs::resolve`]).
    #[arg(skip)]
    kwargs: serde_json::Map<String, serde_json::Value>,
}

impl ReasoningArgs {
    /// Reads `--skip-chat-parsing`'s variable, and refuses a budget that is not built.
    pub fn resolve(&mut self, m: &ArgMatches) -> Result<(), String> {
        self.skip_chat_parsing = super::table::pair(
            m,
            "skip_chat_parsing",
            "no_skip_chat_parsing",
            "LLAMA_ARG_SKIP_CHAT_PARSING",
            false,
        )?;
        self.no_skip_chat_parsing = !self.skip_chat_parsing;
        if let Some(text) = &self.chat_template_kwargs {
            self.kwargs = parse_kwargs(text)?;
        }
        match self.reasoning_budget {
            n if n >= -1 => Ok(()),
            n => Err(format!(
                "--reasoning-budget {n}: expected -1 (unrestricted), 0 (no thinking) or a \
                 number of tokens"
            )),
        }
    }

    /// The budget a thought has: `None` unlimited.
    pub fn budget(&self) -> Option<usize> {
        usize::try_from(self.reasoning_budget).ok()
    }

    /// The name of where thoughts go: `none` with `--skip-chat-parsing`, else the flag's.
    pub fn format_name(&self) -> &str {
        if self.skip_chat_parsing {
            "none"
        } else {
            &self.reasoning_format
        }
    }

    /// The variables every chat template is given: `--chat-template-kwargs`, and
    /// `enable_thinking` where the flags decide it and the kwargs do not (otherwise the
    /// template's own default: true where it thinks, see `ChatTemplate::thinks`).
    pub fn template_kwargs(&self) -> serde_json::Map<String, serde_json::Value> {
        let mut kwargs = self.kwargs.clone();
        if let Some(on) = self.enable_thinking() {
            kwargs.entry("enable_thinking").or_insert(on.into());
        }
        kwargs
    }

    /// The template's `enable_thinking`, when the flags decide it.
    pub fn enable_thinking(&self) -> Option<bool> {
        if self.reasoning_budget == 0 {
            return Some(false);
        }
        match self.reasoning.as_str() {
            "on" => Some(true),
            "off" => Some(false),
            _ => None,
        }
    }
}

/// `--chat-template-kwargs`: a JSON object.
fn parse_kwargs(text: &str) -> Result<serde_json::Map<String, serde_json::Value>, String> {
    match serde_json::from_str::<serde_json::Value>(text) {
        Ok(serde_json::Value::Object(m)) => Ok(m),
        Ok(other) => Err(format!(
            "--chat-template-kwargs: expected a JSON object, got {}",
            match other {
                serde_json::Value::Array(_) => "an array",
                serde_json::Value::String(_) => "a string",
                serde_json::Value::Number(_) => "a number",
                serde_json::Value::Bool(_) => "a boolean",
                _ => "null",
            }
        )),
        Err(e) => Err(format!("--chat-template-kwargs: not valid JSON: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::parse_kwargs;

    #[test]
    fn kwargs_must_be_a_json_object() {
        let m = parse_kwargs(r#"{"enable_thinking": false, "x": [1]}"#).unwrap();
        assert_eq!(m["enable_thinking"], false);
        assert!(parse_kwargs("[1]")
            .unwrap_err()
            .contains("expected a JSON object, got an array"));
        assert!(parse_kwargs("{").unwrap_err().contains("not valid JSON"));
    }
}
