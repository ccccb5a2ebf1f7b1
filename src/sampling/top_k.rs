//! Top-k: keep the k most likely candidates.

use super::Candidates;

/// Keeps the `k` highest logits; `k <= 0` keeps all.
pub fn apply(c: &mut Candidates, k: i32) {
    if k > 0 && (k as usize) < c.len() {
        c.truncate(k as usize);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_k_best() {
        let mut c = Candidates::from_logits(&[0.0, 3.0, 1.0, 2.0]);
        apply(&mut c, 2);
        assert_eq!(c.ids(), vec![1, 3]);
        apply(&mut c, 0);
        assert_eq!(c.len(), 2);
    }
}
