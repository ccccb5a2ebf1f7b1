//! The element formats a KV cache row can be stored in: llama.cpp's `-ctk`/`-ctv` types. A row
//! of `n` values is `n / block` blocks of the format (block size 1 for the float types, 32 for
//! the quantized ones), encoded as ggml's CPU backend encodes cache rows (its `from_float`:
//! the reference quantizers, and for Q8_0 its x86 SIMD quantizer), and read back the way its
//! flash attention reads them: a key row dotted with the query converted to the format's
//! `vec_dot_type`, a value row expanded to f32.

use super::iq4_nl;
use crate::quant::{self, GgmlType};

/// How one cache row (keys or values) is stored.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum KvType {
    F32,
    #[default]
    F16,
    Bf16,
    Q8_0,
    Q4_0,
    Q4_1,
    Iq4Nl,
    Q5_0,
    Q5_1,
}

impl KvType {
    /// Every type, in llama.cpp's `--cache-type-k` help order.
    pub const ALL: [KvType; 9] = [
        KvType::F32,
        KvType::F16,
        KvType::Bf16,
        KvType::Q8_0,
        KvType::Q4_0,
        KvType::Q4_1,
        KvType::Iq4Nl,
        KvType::Q5_0,
        KvType::Q5_1,
    ];

    /// ggml's name (`q8_0`, `iq4_nl`, ...), as the flags spell it.
    pub fn name(self) -> &'static str {
        match self {
            KvType::F32 => "f32",
            KvType::F16 => "f16",
            KvType::Bf16 => "bf16",
            KvType::Q8_0 => "q8_0",
            KvType::Q4_0 => "q4_0",
            KvType::Q4_1 => "q4_1",
            KvType::Iq4Nl => "iq4_nl",
            KvType::Q5_0 => "q5_0",
            KvType::Q5_1 => "q5_1",
        }
    }

    /// The type named `name` (ggml's spelling), if it is one.
    pub fn parse(name: &str) -> Option<KvType> {
        KvType::ALL.into_iter().find(|t| t.name() == name)
    }

    /// ggml's type id (what a saved cache records).
    pub fn id(self) -> u32 {
        match self.ggml() {
            Some(t) => t.id(),
            None => iq4_nl::GGML_ID,
        }
    }

    /// The type of ggml id `id`, if it is a cache type.
    pub fn from_id(id: u32) -> Option<KvType> {
        KvType::ALL.into_iter().find(|t| t.id() == id)
    }

    /// Values per block: a row's length must be a multiple of it.
    pub fn block_elems(self) -> usize {
        match self {
            KvType::F32 | KvType::F16 | KvType::Bf16 => 1,
            _ => 32,
        }
    }

    /// Whether the type is a block-quantized one (llama.cpp's `ggml_is_quantized`).
    pub fn is_quantized(self) -> bool {
        self.block_elems() > 1
    }

    /// Bytes of a row of `n` values (`n` a multiple of [`KvType::block_elems`]).
    pub fn row_bytes(self, n: usize) -> usize {
        debug_assert!(n.is_multiple_of(self.block_elems()));
        let block = match self.ggml() {
            Some(t) => t.block_bytes(),
            None => iq4_nl::BLOCK_BYTES,
        };
        n / self.block_elems() * block
    }

    /// The quant-module type of the same layout (all but IQ4_NL, which lives beside this file).
    fn ggml(self) -> Option<GgmlType> {
        Some(match self {
            KvType::F32 => GgmlType::F32,
            KvType::F16 => GgmlType::F16,
            KvType::Bf16 => GgmlType::BF16,
            KvType::Q8_0 => GgmlType::Q8_0,
            KvType::Q4_0 => GgmlType::Q4_0,
            KvType::Q4_1 => GgmlType::Q4_1,
            KvType::Q5_0 => GgmlType::Q5_0,
            KvType::Q5_1 => GgmlType::Q5_1,
            KvType::Iq4Nl => return None,
        })
    }

    /// Encodes `src` into `dst` (exactly [`KvType::row_bytes`] of `src.len()`).
    pub fn encode(self, src: &[f32], dst: &mut [u8]) {
        match self.ggml() {
            Some(t) => quant::quantize_row(t, src, dst),
            None => iq4_nl::quantize(src, dst),
        }
    }

    /// Decodes the row `src` into `dst`.
    pub fn decode(self, src: &[u8], dst: &mut [f32]) {
        match self.ggml() {
            Some(t) => quant::dequantize_row(t, src, dst),
            None => iq4_nl::dequantize(src, dst),
        }
    }

    /// The format a query is converted to before its dot products with key rows of this type
    /// (ggml's `vec_dot_type`).
    fn query_type(self) -> GgmlType {
        match self.ggml() {
            Some(t) => t.vec_dot_type(),
            None => GgmlType::Q8_0,
        }
    }

    /// Bytes of a query of `n` values converted for key rows of this type.
    pub fn query_bytes(self, n: usize) -> usize {
        self.query_type().bytes_for(n as u64).unwrap_or(0) as usize
    }

    /// Converts the query `q` for dot products with key rows of this type (`dst` is
    /// [`KvType::query_bytes`] long).
    pub fn prepare_query(self, q: &[f32], dst: &mut [u8]) {
        quant::quantize_row(self.query_type(), q, dst);
    }

    /// Dot products of one key row `k` (`n` values of this type) with the converted queries in
    /// `queries`, each [`KvType::query_bytes`] long; `out[i]` gets the i-th.
    pub fn dots(self, n: usize, k: &[u8], queries: &[u8], out: &mut [f32]) {
        match self.ggml() {
            Some(t) => quant::vec_dot_rows(t, n, k, queries, self.query_bytes(n), out),
            None => iq4_nl::vec_dot_rows(k, queries, self.query_bytes(n), out),
        }
    }
}

impl std::fmt::Display for KvType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(n: usize, seed: u64) -> Vec<f32> {
        let mut s = seed;
        (0..n)
            .map(|_| {
                s = s
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((s >> 40) as f32 / (1u64 << 24) as f32) * 4.0 - 2.0
            })
            .collect()
    }

    /// The largest error a round trip may have, from the block's largest magnitude `amax`: the
    /// format's step (half of it where rounding is to the nearest level over the whole range;
    /// a whole one at the end Q4_0/Q5_0 clip, whose levels reach only 7/8 and 15/16 of the
    /// scale), plus the f16 scale's rounding. f16/bf16 round relative to the value.
    fn bound(t: KvType, amax: f32, x: f32) -> f32 {
        let scale = amax * 2f32.powi(-9);
        match t {
            KvType::F32 => 0.0,
            KvType::F16 => x.abs() * 2f32.powi(-11),
            KvType::Bf16 => x.abs() * 2f32.powi(-8),
            KvType::Q8_0 => amax / 127.0 * 0.5 + scale,
            KvType::Q4_0 => amax / 8.0 + scale,
            // min..max in 15 steps: half a step of at most 2·amax/15
            KvType::Q4_1 => amax / 15.0 + scale,
            KvType::Q5_0 => amax / 16.0 + scale,
            KvType::Q5_1 => amax / 31.0 + scale,
            // levels from -127 to 113 (the end clips 14/127), gaps up to 24/127
            KvType::Iq4Nl => amax * 14.0 / 127.0 + scale,
        }
    }

    #[test]
    fn names_ids_and_sizes() {
        for t in KvType::ALL {
            assert_eq!(KvType::parse(t.name()), Some(t));
            assert_eq!(KvType::from_id(t.id()), Some(t));
        }
        assert_eq!(KvType::parse("q8_1"), None);
        assert_eq!(KvType::Q8_0.row_bytes(64), 68);
        assert_eq!(KvType::Q4_0.row_bytes(64), 36);
        assert_eq!(KvType::Iq4Nl.row_bytes(32), 18);
        assert_eq!(KvType::Iq4Nl.id(), 20);
        assert_eq!(KvType::Bf16.row_bytes(3), 6);
    }

    #[test]
    fn every_type_round_trips_a_row_within_its_step() {
        let n = 128;
        let x = row(n, 3);
        for t in KvType::ALL {
            let mut bytes = vec![0u8; t.row_bytes(n)];
            t.encode(&x, &mut bytes);
            let mut back = vec![0f32; n];
            t.decode(&bytes, &mut back);
            for (b, (xs, ys)) in x.chunks(32).zip(back.chunks(32)).enumerate() {
                let amax = xs.iter().fold(0f32, |m, v| m.max(v.abs()));
                for (i, (a, y)) in xs.iter().zip(ys).enumerate() {
                    assert!(
                        (a - y).abs() <= bound(t, amax, *a),
                        "{t}: block {b} element {i}: {a} came back as {y}"
                    );
                }
            }
        }
    }

    #[test]
    fn key_dots_match_the_decoded_rows() {
        let n = 64;
        let k = row(n, 11);
        let qs = [row(n, 5), row(n, 6)];
        for t in KvType::ALL {
            let mut kb = vec![0u8; t.row_bytes(n)];
            t.encode(&k, &mut kb);
            let mut kd = vec![0f32; n];
            t.decode(&kb, &mut kd);
            let qb = t.query_bytes(n);
            let mut conv = vec![0u8; 2 * qb];
            for (q, c) in qs.iter().zip(conv.chunks_exact_mut(qb)) {
                t.prepare_query(q, c);
            }
            let mut out = [0f32; 2];
            t.dots(n, &kb, &conv, &mut out);
            for (q, got) in qs.iter().zip(out) {
                let want: f32 = kd.iter().zip(q).map(|(a, b)| a * b).sum();
                // the query's own conversion: q8 steps of amax/127 (~1%), f16/bf16 rounding
                let tol = 0.02 * q.iter().zip(&kd).map(|(a, b)| (a * b).abs()).sum::<f32>();
                assert!((got - want).abs() <= tol, "{t}: {got} vs {want}");
            }
        }
    }
}
