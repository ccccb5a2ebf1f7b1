//! Stop sequences in generated text that arrives piece by piece: where the first one occurs,
//! how much of the text's end could still grow into one, and a watcher for the CLI's reverse
//! prompts built on the two.

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

/// Watches text for any of its stop sequences, keeping only the end that one could still span.
#[derive(Clone, Debug, Default)]
pub struct StopWatch {
    stops: Vec<String>,
    tail: String,
}

impl StopWatch {
    pub fn new(stops: Vec<String>) -> StopWatch {
        StopWatch {
            stops,
            tail: String::new(),
        }
    }

    /// Adds `text`; true once a stop sequence has appeared (anywhere in it, or across pieces).
    pub fn push(&mut self, text: &str) -> bool {
        if self.stops.is_empty() {
            return false;
        }
        self.tail.push_str(text);
        if find_stop(&self.tail, &self.stops).is_some() {
            return true;
        }
        let keep = partial_stop(&self.tail, &self.stops);
        self.tail.drain(..self.tail.len() - keep);
        false
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
    fn watch_spots_stops_across_and_inside_pieces() {
        let mut w = StopWatch::new(vec!["User:".to_string()]);
        assert!(!w.push("Hello. Us"));
        assert!(w.push("er: hi"));
        let mut w = StopWatch::new(vec!["7,".to_string()]);
        assert!(!w.push(" 6,"));
        assert!(
            w.push(" 7, 8"),
            "a stop followed by more text in the same piece"
        );
        assert!(!StopWatch::new(Vec::new()).push("anything"));
    }
}
