//! Locally typical sampling (typical-p): keep the candidates whose surprise is closest to the
//! distribution's entropy until their mass exceeds p.

use super::Candidates;

/// Keeps the most typical candidates whose cumulative probability exceeds `p`; `p >= 1` keeps
/// all.
pub fn apply(c: &mut Candidates, p: f32) {
    if p >= 1.0 || c.len() <= 1 {
        return;
    }
    let probs = c.probs();
    let entropy: f32 = -probs
        .iter()
        .filter(|&&q| q > 0.0)
        .map(|q| q * q.ln())
        .sum::<f32>();
    let shift: Vec<f32> = probs.iter().map(|q| (-q.ln() - entropy).abs()).collect();
    let mut order: Vec<usize> = (0..c.len()).collect();
    order.sort_by(|&a, &b| shift[a].total_cmp(&shift[b]));
    let mut cum = 0.0;
    let mut keep = order.len();
    for (i, &k) in order.iter().enumerate() {
        cum += probs[k];
        if cum > p {
            keep = i + 1;
            break;
        }
    }
    c.items = order[..keep].iter().map(|&k| c.items[k]).collect();
    c.sorted = false;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_typical_first() {
        // probs 0.7, 0.2, 0.1: entropy 0.802; surprises 0.357, 1.609, 2.303
        // shifts 0.445, 0.807, 1.501: order 0, 1, 2
        let mut c = Candidates::from_logits(&[0.7f32.ln(), 0.2f32.ln(), 0.1f32.ln()]);
        apply(&mut c, 0.8);
        assert_eq!(c.ids(), vec![0, 1]);
        // A flat head and a long unlikely tail: the typical tokens are the flat ones.
        let mut c = Candidates::from_logits(&[0.0, 0.0, -10.0]);
        apply(&mut c, 0.5);
        assert_eq!(c.len(), 2);
        assert!(!c.ids().contains(&2));
    }
}
