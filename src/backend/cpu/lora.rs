//! LoRA adapters on the CPU: after a weight's product `y = W·x`, each adapter of the pass's
//! [`LoraMix`] that adapts `W` adds `s·B·(A·x)` (llama.cpp's `build_lora_mm`: the low-rank
//! product, scaled, then added), reading `A` and `B` in place from the adapter's mapped file.
//! A fused weight (Phi-3's QKV) is adapted through the rows of `B` its view covers.

use crate::model::lora::{LoraAdapter, LoraMix};
use crate::model::RowView;
use crate::ops::matmul;
use std::ops::Range;

/// The adapters one forward pass applies, with their scales.
pub struct Adapters<'a> {
    active: Vec<(&'a LoraAdapter, f32)>,
}

impl<'a> Adapters<'a> {
    /// The adapters of `loaded` that `mix` gives a scale other than 0, in id order.
    pub fn new(loaded: &'a [std::sync::Arc<LoraAdapter>], mix: &LoraMix) -> Adapters<'a> {
        let active = loaded
            .iter()
            .zip(&mix.scales)
            .filter(|(_, &s)| s != 0.0)
            .map(|(a, &s)| (&**a, s))
            .collect();
        Adapters { active }
    }

    /// No adapter.
    pub fn none() -> Adapters<'static> {
        Adapters { active: Vec::new() }
    }

    /// Adds every active adapter's term for the weight `view` to `out` (`n` rows of the view's
    /// row count), the input being `x` (`n` rows of the weight's columns).
    pub fn apply(&self, view: &RowView, x: &[f32], n: usize, out: &mut [f32]) {
        self.apply_named(&view.tensor.info.name, view.rows.clone(), x, n, out);
    }

    /// [`Adapters::apply`] for rows `rows` of the weight tensor named `name`.
    pub fn apply_named(
        &self,
        name: &str,
        rows: Range<usize>,
        x: &[f32],
        n: usize,
        out: &mut [f32],
    ) {
        if n == 0 {
            return;
        }
        for &(adapter, scale) in &self.active {
            let Some(pair) = adapter.pair(name) else {
                continue;
            };
            let file = &*adapter.file;
            let rank = pair.rank();
            let mut low = vec![0f32; n * rank];
            matmul(&pair.a.mat(file), x, n, &mut low);
            let b = pair.b.mat(file).row_range(rows.clone());
            let mut up = vec![0f32; n * b.rows];
            matmul(&b, &low, n, &mut up);
            let s = adapter.factor(pair, scale);
            out.iter_mut().zip(&up).for_each(|(o, u)| *o += u * s);
        }
    }
}
