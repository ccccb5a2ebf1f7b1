//! llama-server's reasoning flags that act here: where thoughts go (`--reasoning-format`),
//! whether templates think at all (`-rea/--reasoning`, and `--reasoning-budget 0`, which ends
//! thinking before it starts), and `--skip-chat-parsing` (replies are all content: no
//! reasoning or tool calls read out of them).

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
    /// enable_thinking = false). Other budgets are not built.
    #[arg(
        long = "reasoning-budget",
        value_name = "N",
        default_value_t = -1,
        allow_negative_numbers = true,
        env = "LLAMA_ARG_THINK_BUDGET"
    )]
    pub reasoning_budget: i64,

    /// Read nothing out of chat replies: reasoning and tool calls stay in `content`.
    #[arg(long = "skip-chat-parsing", overrides_with = "no_skip_chat_parsing")]
    pub skip_chat_parsing: bool,

    /// Read reasoning and tool calls out of chat replies (the default).
    #[arg(long = "no-skip-chat-parsing", overrides_with = "skip_chat_parsing")]
    pub no_skip_chat_parsing: bool,
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
        match self.reasoning_budget {
            -1 | 0 => Ok(()),
            n => Err(format!(
                "--reasoning-budget {n}: only -1 (unrestricted) and 0 (no thinking) are supported; \
                 thinking budgets of N tokens are not built"
            )),
        }
    }

    /// The name of where thoughts go: `none` with `--skip-chat-parsing`, else the flag's.
    pub fn format_name(&self) -> &str {
        if self.skip_chat_parsing {
            "none"
        } else {
            &self.reasoning_format
        }
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
