//! What generation costs in memory traffic: the weight bytes one generated token reads, and this
//! machine's read bandwidth measured with the compute pool's threads, so that `--bench` can
//! say how close generation runs to the memory wall (bytes per token × tokens/s against the
//! bound, both measured in the same process).

use crate::gguf::GgufFile;
use crate::model::Config;
use std::time::Instant;

/// Bytes of weights read to generate one token: every tensor once, except the token embedding,
/// of which one row is read (unless the output head reuses it, which reads it whole); of a
/// mixture-of-experts tensor the `k` routed experts' share.
pub fn weight_bytes_per_token(file: &GgufFile, config: &Config) -> u64 {
    let tied = file.tensor("output.weight").is_none();
    let expert_share = config
        .moe
        .as_ref()
        .map_or(1.0, |m| m.n_expert_used as f64 / m.n_expert.max(1) as f64);
    file.tensors()
        .iter()
        .map(|t| {
            if t.name == "token_embd.weight" && !tied {
                0
            } else if t.name.contains("_exps") {
                (t.n_bytes() as f64 * expert_share) as u64
            } else {
                t.n_bytes()
            }
        })
        .sum()
}

/// Bytes read per pass by [`read_bandwidth`]: well beyond any last-level cache.
const BUFFER_BYTES: usize = 512 << 20;

/// The best of several timed passes reading a buffer of [`BUFFER_BYTES`] (anonymous memory,
/// advised into huge pages as the weights' mapping is) on every thread of the compute pool,
/// each thread one contiguous part: the read bound generation can reach, in bytes per second.
pub fn read_bandwidth(passes: usize) -> f64 {
    let pool = crate::pool::global();
    let words = BUFFER_BYTES / 8;
    let mut map = match memmap2::MmapMut::map_anon(BUFFER_BYTES) {
        Ok(m) => m,
        Err(_) => return 0.0,
    };
    #[cfg(any(target_os = "linux", target_os = "android"))]
    let _ = map.advise(memmap2::Advice::HugePage);
    // Touch every page with non-zero data, so reads hit real memory, not the zero page.
    let per_task = words.div_ceil(pool.threads()) * 8;
    pool.for_each_chunk(&mut map[..], per_task, |i, part| {
        for (j, b) in part.iter_mut().enumerate() {
            *b = (i + j) as u8 | 1;
        }
    });
    let buf: &[u8] = &map;
    let mut best = f64::INFINITY;
    for _ in 0..passes.max(1) {
        let t = Instant::now();
        pool.run(pool.threads(), |i| {
            let part = &buf[(i * per_task).min(buf.len())..((i + 1) * per_task).min(buf.len())];
            std::hint::black_box(sum_words(part));
        });
        best = best.min(t.elapsed().as_secs_f64());
    }
    BUFFER_BYTES as f64 / best
}

/// A cheap reduction over every 8-byte word of `b`, in four independent lanes so the loop is
/// bound by loads, not by one addition chain.
fn sum_words(b: &[u8]) -> u64 {
    let mut acc = [0u64; 4];
    for c in b.chunks_exact(32) {
        for (k, a) in acc.iter_mut().enumerate() {
            let w = u64::from_le_bytes(c[8 * k..8 * k + 8].try_into().unwrap_or([0; 8]));
            *a = a.wrapping_add(w);
        }
    }
    acc.iter().fold(0, |s, a| s ^ a)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sum_words_reads_every_word() {
        let mut b = vec![0u8; 64];
        b[0] = 1;
        b[40] = 2;
        assert_eq!(sum_words(&b), 1 ^ 2);
        b[63] = 1;
        assert_ne!(sum_words(&b), 1 ^ 2);
    }
}
