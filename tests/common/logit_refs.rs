//! llama.cpp's stored logits for synthetic models (`tests/data/families/`, `tests/data/lora/`,
//! written by `tools/make-family-refs.sh` and `tools/make-lora-refs.sh`): reading a set's rows,
//! and the verdict on ours, which must stay within twice llama.cpp's own batched-vs-single
//! noise and agree on the argmax about as often as llama.cpp agrees with itself.

use std::path::Path;

/// One position of llama.cpp's reference: its top ids and logits, and the fixed sample's logits.
pub struct RefRow {
    pub top: Vec<(usize, f32)>,
    pub sample: Vec<f32>,
}

/// The rows of set `name` in `dir` (`NAME.bin`: per row `k` ids, their `k` logits, then the
/// `n_sample` sampled ids' logits, little-endian 32-bit words).
pub fn read_rows(dir: &Path, name: &str, k: usize, n_sample: usize) -> Vec<RefRow> {
    let bytes = std::fs::read(dir.join(format!("{name}.bin"))).unwrap();
    let word = |i: usize| <[u8; 4]>::try_from(&bytes[4 * i..4 * i + 4]).unwrap();
    let per_row = 2 * k + n_sample;
    assert_eq!(bytes.len() % (4 * per_row), 0, "{name}.bin: truncated");
    (0..bytes.len() / (4 * per_row))
        .map(|r| {
            let base = r * per_row;
            RefRow {
                top: (0..k)
                    .map(|j| {
                        (
                            u32::from_le_bytes(word(base + j)) as usize,
                            f32::from_le_bytes(word(base + k + j)),
                        )
                    })
                    .collect(),
                sample: (0..n_sample)
                    .map(|j| f32::from_le_bytes(word(base + 2 * k + j)))
                    .collect(),
            }
        })
        .collect()
}

/// Our rows against llama.cpp's, accumulated position by position.
#[derive(Default)]
pub struct Agreement {
    diff_sum: f64,
    diff_n: usize,
    agree: usize,
    rows: usize,
}

impl Agreement {
    /// Adds one position: our logits `row` against `want`, whose samples are of ids `sample`.
    pub fn add(&mut self, row: &[f32], want: &RefRow, sample: &[usize]) {
        self.rows += 1;
        let argmax = (0..row.len())
            .max_by(|&a, &b| row[a].total_cmp(&row[b]).then(b.cmp(&a)))
            .unwrap();
        self.agree += (argmax == want.top[0].0) as usize;
        let pairs = want
            .top
            .iter()
            .copied()
            .chain(sample.iter().copied().zip(want.sample.iter().copied()));
        for (id, lg) in pairs {
            self.diff_sum += (row[id] as f64 - lg as f64).abs();
            self.diff_n += 1;
        }
    }

    /// Positions added so far.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Fails unless the mean |dlogit| is within twice the set's `noise_mean_abs` and the argmax
    /// agreement within 3 points of its `noise_argmax_agree`.
    pub fn assert_within_noise(&self, name: &str, set: &serde_json::Value) {
        let (agree, r) = (self.agree, self.rows);
        let mean = self.diff_sum / self.diff_n as f64;
        let noise = set["noise_mean_abs"].as_f64().unwrap();
        let noise_agree = set["noise_argmax_agree"].as_f64().unwrap();
        let agreement = agree as f64 / r as f64;
        eprintln!(
            "{name}: mean |dlogit| {mean:.5} (llama.cpp's own noise {noise:.5}), argmax \
             agreement {agree}/{r} (llama.cpp's own {:.1}%)",
            noise_agree * 100.0
        );
        assert!(
            mean <= 2.0 * noise,
            "{name}: mean |dlogit| {mean:.5} exceeds twice llama.cpp's own noise {noise:.5}"
        );
        assert!(
            agreement >= noise_agree - 0.03,
            "{name}: argmax agrees with llama.cpp at {:.1}% of positions, llama.cpp with itself \
             at {:.1}%",
            agreement * 100.0,
            noise_agree * 100.0
        );
    }
}
