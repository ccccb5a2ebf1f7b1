//! Thinking in a reply (`--reasoning-format`): reasoning models (DeepSeek R1 and its distills,
//! Qwen 3, QwQ, ...) write their thoughts between `<think>` and `</think>` before the answer,
//! or their template opens the tag itself at the end of the prompt. The splitter reads a reply
//! as it streams and hands the thoughts and the answer out separately.

/// Where thoughts go, as llama.cpp's `--reasoning-format` names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReasoningFormat {
    /// Thoughts stay in the content as written.
    None,
    /// Thoughts go to `reasoning_content`, out of the content (also what `auto` means).
    Deepseek,
    /// Thoughts go to `reasoning_content`, and the content keeps them, tags included.
    DeepseekLegacy,
}

impl ReasoningFormat {
    /// `none`, `deepseek`, `deepseek-legacy` or `auto` (= `deepseek`).
    pub fn parse(name: &str) -> Option<ReasoningFormat> {
        match name {
            "none" => Some(ReasoningFormat::None),
            "deepseek" | "auto" => Some(ReasoningFormat::Deepseek),
            "deepseek-legacy" => Some(ReasoningFormat::DeepseekLegacy),
            _ => None,
        }
    }
}

const OPEN: &str = "<think>";
const CLOSE: &str = "</think>";

/// Whether a rendered prompt leaves the model inside a thought (its template opened `<think>`).
pub fn opens_thinking(prompt: &str) -> bool {
    prompt.trim_end().ends_with(OPEN)
}

/// Whether replies to `template` (its source) or to `prompt` think between the tags.
pub fn thinks(template: &str, prompt: &str) -> bool {
    template.contains(CLOSE) || opens_thinking(prompt)
}

/// The thinking budget of a reply to `prompt`: `tokens` a thought (`None`: unlimited, which
/// still tells a lazy grammar where thoughts are), then `message` and the end tag are forced.
pub fn budget_spec(
    tok: &crate::tokenizer::Tokenizer,
    tokens: Option<usize>,
    message: &str,
    prompt: &str,
) -> crate::sampling::BudgetSpec {
    let encode = |text: &str| tok.encode(text, false, true);
    let end = encode(CLOSE);
    let mut forced = encode(message);
    forced.extend_from_slice(&end);
    crate::sampling::BudgetSpec {
        start: encode(OPEN),
        ends: vec![end],
        forced,
        tokens: tokens.unwrap_or(usize::MAX),
        starts_inside: opens_thinking(prompt),
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stage {
    /// Not known yet whether the reply starts with a thought.
    Before,
    Inside,
    After,
}

/// Thoughts and answer out of a streamed reply.
#[derive(Clone, Debug)]
pub struct ThinkSplitter {
    format: ReasoningFormat,
    stage: Stage,
    /// Text read but not handed out yet (a possible tag).
    pending: String,
    /// Nothing of the thought handed out yet (its leading whitespace is dropped).
    thought_started: bool,
    /// Nothing of the answer after a thought handed out yet (likewise).
    answer_started: bool,
}

/// One step's output: thoughts and answer text.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Split {
    pub reasoning: String,
    pub content: String,
}

impl ThinkSplitter {
    /// A splitter for a reply whose prompt already opened a thought (`opened`), or not.
    pub fn new(format: ReasoningFormat, opened: bool) -> ThinkSplitter {
        ThinkSplitter {
            format,
            stage: if opened { Stage::Inside } else { Stage::Before },
            pending: String::new(),
            thought_started: false,
            answer_started: false,
        }
    }

    /// Adds `text`; returns what can be handed out now.
    pub fn push(&mut self, text: &str) -> Split {
        if self.format == ReasoningFormat::None {
            return Split {
                reasoning: String::new(),
                content: text.to_string(),
            };
        }
        let mut out = Split::default();
        if self.format == ReasoningFormat::DeepseekLegacy {
            out.content.push_str(text);
        }
        self.pending.push_str(text);
        loop {
            match self.stage {
                Stage::Before => {
                    let t = self.pending.trim_start();
                    if let Some(rest) = t.strip_prefix(OPEN) {
                        self.pending = rest.to_string();
                        self.stage = Stage::Inside;
                    } else if OPEN.starts_with(t) {
                        return out; // maybe a tag still coming
                    } else {
                        self.stage = Stage::After;
                        self.answer_started = true;
                    }
                }
                Stage::Inside => {
                    if let Some(i) = self.pending.find(CLOSE) {
                        let thought = self.pending[..i].to_string();
                        self.emit_thought(&mut out, &thought);
                        self.pending = self.pending[i + CLOSE.len()..].to_string();
                        self.stage = Stage::After;
                        continue;
                    }
                    let keep = partial_tail(&self.pending, CLOSE);
                    let thought = self.pending[..self.pending.len() - keep].to_string();
                    self.emit_thought(&mut out, &thought);
                    self.pending.drain(..self.pending.len() - keep);
                    return out;
                }
                Stage::After => {
                    let answer = std::mem::take(&mut self.pending);
                    self.emit_answer(&mut out, &answer);
                    return out;
                }
            }
        }
    }

    /// The end of the reply: what was held back (an unclosed thought is a thought).
    pub fn finish(&mut self) -> Split {
        let mut out = Split::default();
        let rest = std::mem::take(&mut self.pending);
        match (self.format, self.stage) {
            (ReasoningFormat::None, _) => {}
            (_, Stage::Inside) => self.emit_thought(&mut out, &rest),
            (ReasoningFormat::Deepseek, _) => self.emit_answer(&mut out, &rest),
            (ReasoningFormat::DeepseekLegacy, _) => {}
        }
        out
    }

    fn emit_thought(&mut self, out: &mut Split, text: &str) {
        let text = if self.thought_started {
            text
        } else {
            text.trim_start()
        };
        if !text.is_empty() {
            self.thought_started = true;
            out.reasoning.push_str(text);
        }
    }

    fn emit_answer(&mut self, out: &mut Split, text: &str) {
        if self.format == ReasoningFormat::DeepseekLegacy {
            return; // the content already has everything
        }
        let text = if self.answer_started {
            text
        } else {
            text.trim_start()
        };
        if !text.is_empty() {
            self.answer_started = true;
            out.content.push_str(text);
        }
    }
}

/// The length of the longest tail of `text` that `tag` starts with (a tag still coming).
pub fn partial_tail(text: &str, tag: &str) -> usize {
    text.char_indices()
        .map(|(i, _)| i)
        .find(|&i| tag.starts_with(&text[i..]))
        .map_or(0, |i| text.len() - i)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(format: ReasoningFormat, opened: bool, pieces: &[&str]) -> (String, String) {
        let mut s = ThinkSplitter::new(format, opened);
        let mut out = Split::default();
        for p in pieces {
            let o = s.push(p);
            out.reasoning.push_str(&o.reasoning);
            out.content.push_str(&o.content);
        }
        let o = s.finish();
        out.reasoning.push_str(&o.reasoning);
        out.content.push_str(&o.content);
        (out.reasoning, out.content)
    }

    #[test]
    fn thoughts_come_out_apart_in_any_pieces() {
        let text = "<think>\nLet me add.\n</think>\n\nIt is 4.";
        let want = ("Let me add.\n".to_string(), "It is 4.".to_string());
        assert_eq!(split(ReasoningFormat::Deepseek, false, &[text]), want);
        let chars: Vec<String> = text.chars().map(String::from).collect();
        let pieces: Vec<&str> = chars.iter().map(String::as_str).collect();
        assert_eq!(split(ReasoningFormat::Deepseek, false, &pieces), want);
    }

    #[test]
    fn an_opened_thought_and_an_unclosed_one() {
        assert_eq!(
            split(ReasoningFormat::Deepseek, true, &["hmm</think>ok"]),
            ("hmm".into(), "ok".into())
        );
        assert_eq!(
            split(ReasoningFormat::Deepseek, false, &["<think>still thinking"]),
            ("still thinking".into(), String::new())
        );
    }

    #[test]
    fn replies_without_thoughts_pass() {
        for text in ["Hello", "<thin", "a <think>b</think>", ""] {
            assert_eq!(
                split(ReasoningFormat::Deepseek, false, &[text]),
                (String::new(), text.to_string()),
                "{text}"
            );
        }
    }

    #[test]
    fn none_and_legacy() {
        let text = "<think>x</think>y";
        assert_eq!(
            split(ReasoningFormat::None, false, &[text]),
            (String::new(), text.into())
        );
        assert_eq!(
            split(ReasoningFormat::DeepseekLegacy, false, &[text]),
            ("x".into(), text.into())
        );
        assert_eq!(
            ReasoningFormat::parse("auto"),
            Some(ReasoningFormat::Deepseek)
        );
        assert!(opens_thinking("<|im_start|>assistant\n<think>\n"));
    }
}
