//! Repetition, frequency and presence penalties over the recent tokens (llama.cpp's
//! `penalties` sampler): a seen token's logit is divided by the repeat penalty when positive and
//! multiplied by it when negative, then lowered by `count * frequency + presence`.

use super::Candidates;
use std::collections::HashMap;

/// The three penalties; `repeat = 1`, `frequency = presence = 0` disables them.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Penalties {
    pub repeat: f32,
    pub frequency: f32,
    pub presence: f32,
}

impl Penalties {
    fn is_off(&self) -> bool {
        self.repeat == 1.0 && self.frequency == 0.0 && self.presence == 0.0
    }
}

/// Penalises every candidate that occurs in `recent`.
pub fn apply(c: &mut Candidates, recent: &[u32], p: Penalties) {
    if p.is_off() || recent.is_empty() {
        return;
    }
    let mut counts: HashMap<u32, u32> = HashMap::new();
    for &t in recent {
        *counts.entry(t).or_default() += 1;
    }
    for item in c.items.iter_mut() {
        let Some(&count) = counts.get(&item.id) else {
            continue;
        };
        let l = &mut item.logit;
        *l = if *l <= 0.0 {
            *l * p.repeat
        } else {
            *l / p.repeat
        };
        *l -= count as f32 * p.frequency + p.presence;
    }
    c.sorted = false;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repeat_penalty_on_seen_tokens_only() {
        let mut c = Candidates::from_logits(&[2.0, -2.0, 2.0]);
        let p = Penalties {
            repeat: 2.0,
            frequency: 0.0,
            presence: 0.0,
        };
        apply(&mut c, &[0, 1, 1], p);
        assert_eq!(c.logits(), vec![1.0, -4.0, 2.0]);
    }

    #[test]
    fn frequency_and_presence() {
        let mut c = Candidates::from_logits(&[2.0, -2.0, 2.0]);
        let p = Penalties {
            repeat: 1.0,
            frequency: 0.5,
            presence: 0.25,
        };
        apply(&mut c, &[0, 1, 1], p);
        // token 0 seen once: 2 - 0.5 - 0.25; token 1 twice: -2 - 1.0 - 0.25
        assert_eq!(c.logits(), vec![1.25, -3.25, 2.0]);
    }
}
