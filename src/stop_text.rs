//! Stop sequences in generated text that arrives piece by piece: where the first one occurs,
//! how much of the text's end could still grow into one, and [`StopText`], the one filter built
//! on the two that both the server's stop strings and the CLI's reverse prompts use.

/// The earliest stop sequence in `text`: its byte offset and the sequence.
pub fn find_stop(text: &str, stops: &[String]) -> Option<(usize, String)> {
    stops
        .iter()
        .filter_map(|s| text.find(s.as_str()).map(|at| (at, s.clone())))
        .min_by_key(|(at, _)| *at)
}

/// Bytes at the end of `text` that could be the start of a stop sequence.
pub fn partial_stop(text: &str, stops: &[String]) -> usize {
    let mut hold = 0;
    for s in stops {
        for (i, _) in s.char_indices().skip(1) {
            if i > hold && text.ends_with(&s[..i]) {
                hold = i;
            }
        }
    }
    hold
}

/// Text arriving piece by piece, checked for stop sequences: the text that can no longer be
/// part of one is released, the end that could still grow into one is held back, and the text
/// before the first stop sequence is the last released. The server streams what it releases;
/// the CLI's reverse prompts only ask whether a stop appeared ([`StopText::push`]`.stopped`).
#[derive(Clone, Debug, Default)]
pub struct StopText {
    stops: Vec<String>,
    /// Text held back: it may be the start of a stop sequence.
    held: String,
}

/// What one more piece of text released.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Released {
    /// Text that can be passed on (may be empty).
    pub text: String,
    /// Nothing is held back after `text`.
    pub whole: bool,
    /// The stop sequence that appeared; `text` ends just before it.
    pub stopped: Option<String>,
}

impl StopText {
    pub fn new(stops: Vec<String>) -> StopText {
        StopText {
            stops,
            held: String::new(),
        }
    }

    /// Adds `piece`: the text now released, and the stop sequence if one appeared (anywhere
    /// in the piece, or across pieces).
    pub fn push(&mut self, piece: &str) -> Released {
        if self.stops.is_empty() {
            return Released {
                text: piece.to_string(),
                whole: true,
                stopped: None,
            };
        }
        self.held.push_str(piece);
        if let Some((at, word)) = find_stop(&self.held, &self.stops) {
            let text = self.held[..at].to_string();
            self.held.clear();
            return Released {
                text,
                whole: true,
                stopped: Some(word),
            };
        }
        let hold = partial_stop(&self.held, &self.stops);
        let send = self.held.len() - hold;
        Released {
            text: self.held.drain(..send).collect(),
            whole: hold == 0,
            stopped: None,
        }
    }

    /// At the end of the text: everything held back, with `rest` (the decoder's last bytes)
    /// added and anything from a stop sequence on cut.
    pub fn finish(&mut self, rest: &str) -> String {
        self.held.push_str(rest);
        if let Some((at, _)) = find_stop(&self.held, &self.stops) {
            self.held.truncate(at);
        }
        std::mem::take(&mut self.held)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stop_sequences() {
        let stops = vec!["END".to_string(), "\n\n".to_string()];
        assert_eq!(find_stop("abc\n\nxEND", &stops), Some((3, "\n\n".into())));
        assert_eq!(partial_stop("abcEN", &stops), 2);
        assert_eq!(partial_stop("abc\n", &stops), 1);
        assert_eq!(partial_stop("abc", &stops), 0);
        assert_eq!(partial_stop("é", &["éa".to_string()]), 2);
    }

    #[test]
    fn stops_are_spotted_across_and_inside_pieces() {
        let mut w = StopText::new(vec!["User:".to_string()]);
        assert_eq!(w.push("Hello. Us").stopped, None);
        assert_eq!(w.push("er: hi").stopped.as_deref(), Some("User:"));
        let mut w = StopText::new(vec!["7,".to_string()]);
        assert_eq!(w.push(" 6,").stopped, None);
        assert!(
            w.push(" 7, 8").stopped.is_some(),
            "a stop followed by more text in the same piece"
        );
        assert_eq!(StopText::new(Vec::new()).push("anything").stopped, None);
    }

    #[test]
    fn text_that_may_start_a_stop_is_held_back() {
        let mut w = StopText::new(vec!["END".to_string()]);
        let r = w.push("abcEN");
        assert_eq!((r.text.as_str(), r.whole), ("abc", false));
        let r = w.push("x");
        assert_eq!((r.text.as_str(), r.whole), ("ENx", true));
        let r = w.push("yyEND tail");
        assert_eq!(r.text, "yy");
        assert_eq!(r.stopped.as_deref(), Some("END"));
        let mut w = StopText::new(vec!["END".to_string()]);
        assert_eq!(w.push("aE").text, "a");
        assert_eq!(
            w.finish("ND!"),
            "",
            "a stop completed by the last bytes is cut"
        );
        let mut w = StopText::new(vec!["END".to_string()]);
        w.push("aE");
        assert_eq!(w.finish("x"), "Ex");
    }
}
