//! The repetition penalty: logits of recently seen tokens are divided by the penalty when
//! positive and multiplied by it when negative (llama.cpp's rule).

use super::Candidates;
use std::collections::HashSet;

/// Penalises every candidate that occurs in `recent`.
pub fn apply_repeat(c: &mut Candidates, recent: &[u32], penalty: f32) {
    if penalty == 1.0 || recent.is_empty() {
        return;
    }
    let seen: HashSet<u32> = recent.iter().copied().collect();
    for (id, l) in c.ids.iter().zip(c.logits.iter_mut()) {
        if seen.contains(id) {
            *l = if *l <= 0.0 {
                *l * penalty
            } else {
                *l / penalty
            };
        }
    }
    c.sorted = false;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn penalises_seen_tokens_only() {
        let mut c = Candidates::from_logits(&[2.0, -2.0, 2.0]);
        apply_repeat(&mut c, &[0, 1, 1], 2.0);
        assert_eq!(c.logits, vec![1.0, -4.0, 2.0]);
    }
}
