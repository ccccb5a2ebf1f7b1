//! Temperature: divide logits by t (t < 1 sharpens, t > 1 flattens); `t <= 0` keeps only the
//! most likely token (greedy). Dynamic temperature (`--dynatemp-range`) picks t per step from
//! the normalised entropy: `t = min + (max - min) * H_norm^exp`.

use super::Candidates;

/// Temperature and its dynamic range.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Temperature {
    pub temp: f32,
    /// `> 0` enables dynamic temperature over `[temp - range, temp + range]`.
    pub dynatemp_range: f32,
    pub dynatemp_exponent: f32,
}

/// Applies the (possibly dynamic) temperature.
pub fn apply(c: &mut Candidates, t: Temperature) {
    if t.dynatemp_range > 0.0 {
        apply_dynamic(c, t);
    } else {
        apply_fixed(c, t.temp);
    }
}

/// Scales logits by `1 / t`; `t <= 0` keeps only the highest logit.
pub fn apply_fixed(c: &mut Candidates, t: f32) {
    if t <= 0.0 {
        if !c.is_empty() {
            let best = c.items[c.argmax_index()];
            c.items = vec![best];
            c.sorted = true;
        }
        return;
    }
    c.items.iter_mut().for_each(|x| x.logit /= t);
}

fn apply_dynamic(c: &mut Candidates, t: Temperature) {
    if c.len() <= 1 {
        return;
    }
    let min_t = (t.temp - t.dynatemp_range).max(0.0);
    let max_t = t.temp + t.dynatemp_range;
    let max_entropy = (c.len() as f32).ln();
    let probs = c.probs();
    let entropy: f32 = -probs
        .iter()
        .filter(|&&p| p > 0.0)
        .map(|p| p * p.ln())
        .sum::<f32>();
    let normalized = if max_entropy > 0.0 {
        entropy / max_entropy
    } else {
        0.0
    };
    let dyn_t = min_t + (max_t - min_t) * normalized.powf(t.dynatemp_exponent);
    apply_fixed(c, dyn_t);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixed(temp: f32) -> Temperature {
        Temperature {
            temp,
            dynatemp_range: 0.0,
            dynatemp_exponent: 1.0,
        }
    }

    #[test]
    fn scales_or_keeps_best() {
        let mut c = Candidates::from_logits(&[1.0, -2.0]);
        apply(&mut c, fixed(0.5));
        assert_eq!(c.logits(), vec![2.0, -4.0]);
        let mut c = Candidates::from_logits(&[1.0, 3.0, 3.0]);
        apply(&mut c, fixed(0.0));
        assert_eq!(c.ids(), vec![1]);
    }

    #[test]
    fn dynamic_uses_entropy() {
        // Uniform over 2: normalised entropy 1, so t = temp + range = 1.5.
        let mut c = Candidates::from_logits(&[3.0, 3.0]);
        let t = Temperature {
            temp: 1.0,
            dynatemp_range: 0.5,
            dynatemp_exponent: 1.0,
        };
        apply(&mut c, t);
        assert_eq!(c.logits(), vec![2.0, 2.0]);
        // probs 0.9 / 0.1: H = 0.325, H_norm = 0.469, t = 0.5 + 1.0 * 0.469
        let mut c = Candidates::from_logits(&[0.9f32.ln(), 0.1f32.ln()]);
        apply(&mut c, t);
        let expected = 0.9f32.ln() / (0.5 + 0.325083 / 2f32.ln());
        assert!((c.items[0].logit - expected).abs() < 1e-4, "{:?}", c.items);
    }
}
