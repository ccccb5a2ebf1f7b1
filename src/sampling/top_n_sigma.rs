//! Top-n-sigma: keep candidates whose logit is within `n` standard deviations of the highest
//! (statistics over the finite logits), llama.cpp's `--top-n-sigma`.

use super::Candidates;

/// Drops logits below `max - n * std`; `n <= 0` keeps all.
pub fn apply(c: &mut Candidates, n: f32) {
    if n <= 0.0 || c.len() <= 1 {
        return;
    }
    let finite = || c.items.iter().map(|x| x.logit).filter(|l| l.is_finite());
    let count = finite().count();
    if count == 0 {
        return;
    }
    let max = finite().fold(f32::NEG_INFINITY, f32::max);
    let mean = finite().sum::<f32>() / count as f32;
    let var = finite().map(|l| (l - mean) * (l - mean)).sum::<f32>() / count as f32;
    let threshold = max - n * var.sqrt();
    c.items.retain(|x| x.logit >= threshold);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_within_sigma() {
        // mean 2, std sqrt(2) = 1.414: max - 1 sigma = 2.586
        let mut c = Candidates::from_logits(&[0.0, 1.0, 2.0, 3.0, 4.0]);
        apply(&mut c, 1.0);
        assert_eq!(c.ids(), vec![3, 4]);
        let mut c = Candidates::from_logits(&[0.0, 1.0, 2.0, 3.0, 4.0]);
        apply(&mut c, 2.0); // threshold 1.17
        assert_eq!(c.ids(), vec![2, 3, 4]);
    }
}
