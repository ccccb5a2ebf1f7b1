//! K-quant weights regrouped eight rows at a time ("x8"), the layout the x86 one-token and
//! small-batch kernels read fastest: each 32-bit lane of a 256-bit load holds four bytes of
//! one row, so eight rows' dot products accumulate side by side in the lanes of one register
//! and no horizontal sums, scale gathers or per-row scale shuffles are left in the inner loop.
//! The bytes are those of the original blocks, moved: a regrouped matrix is exactly as large as
//! the original, and any row can be read back ([`unpack_row`]).
//!
//! A group block holds eight rows' blocks of one super-block (256 elements). Each field of the
//! original block becomes planes: unit `u` (two bytes for the f16 scales, four for the rest)
//! of row `r` lands at `plane(u) + r · unit`. In order:
//! - Q4_K (1152 bytes): `d` at 0, `dmin` at 16, the packed 6-bit scales at 32 (three planes),
//!   the quants at 128 (32 planes: plane `8i + g` holds quant bytes `32i + 4g ..`, whose low
//!   nibbles are elements `64i + 4g ..` and high nibbles `64i + 32 + 4g ..`);
//! - Q6_K (1680 bytes): `d` at 0, the sixteen i8 scales at 16 (four planes), then the quants
//!   in the order the kernel reads them, sixteen steps of 96 bytes at 144: step `8h + g` holds
//!   `ql` planes `16h + g` and `16h + 8 + g` and `qh` plane `8h + g` (the four 6-bit quants of
//!   elements `128h + 32k + 4g ..` for k = 0..4), so a group block is read front to back.
//!
//! A matrix's group blocks run group by group (rows `8k..8k + 8`), super-block by super-block
//! within a group, so a matrix-vector product reads it as one stream. Matrices whose row count
//! is not a multiple of eight are not regrouped.

use super::block::as_blocks;
use super::dispatch;
use super::gemm::PackedActs;
use super::q8_k::BlockQ8K;
use super::GgmlType;

/// Rows per group.
pub const ROWS: usize = 8;

/// One field of a block: where it starts in the original block, the bytes of one unit, how
/// many units it has, and where unit `u`'s plane starts in the group block.
struct Field {
    src: usize,
    unit: usize,
    units: usize,
    plane: fn(usize) -> usize,
}

const fn f(src: usize, unit: usize, units: usize, plane: fn(usize) -> usize) -> Field {
    Field {
        src,
        unit,
        units,
        plane,
    }
}

/// The fields of `ty`'s block, or `None` for a type that is never regrouped.
fn fields(ty: GgmlType) -> Option<&'static [Field]> {
    const Q4K: [Field; 4] = [
        f(0, 2, 1, |_| 0),
        f(2, 2, 1, |_| 16),
        f(4, 4, 3, |u| 32 + 32 * u),
        f(16, 4, 32, |u| 128 + 32 * u),
    ];
    // `ql` plane p = 16h + 8j + g goes to step 8h + g, slot j; `qh` plane p to step p, slot 2.
    const Q6K: [Field; 4] = [
        f(208, 2, 1, |_| 0),
        f(192, 4, 4, |u| 16 + 32 * u),
        f(0, 4, 32, |p| {
            144 + 96 * (8 * (p / 16) + p % 8) + 32 * (p % 16 / 8)
        }),
        f(128, 4, 16, |p| 144 + 96 * p + 64),
    ];
    match ty {
        GgmlType::Q4K => Some(&Q4K),
        GgmlType::Q6K => Some(&Q6K),
        _ => None,
    }
}

/// For row `r` of a group of `ty`: (byte of its original block, where that byte lands in the
/// group block), for every byte of the block.
fn scatter_offsets(ty: GgmlType, r: usize) -> impl Iterator<Item = (usize, usize)> {
    fields(ty).unwrap_or(&[]).iter().flat_map(move |fl| {
        (0..fl.units * fl.unit).map(move |k| {
            let (u, b) = (k / fl.unit, k % fl.unit);
            (fl.src + k, (fl.plane)(u) + r * fl.unit + b)
        })
    })
}

/// Whether the kernels in use read `ty` regrouped, and a matrix of `rows` rows can be.
pub fn can_regroup(ty: GgmlType, rows: usize) -> bool {
    let k = dispatch::kernels();
    let slot = dispatch::slot(ty);
    fields(ty).is_some()
        && k.x8_matvec[slot].is_some()
        && k.x8_gemm[slot].is_some()
        && rows > 0
        && rows.is_multiple_of(ROWS)
}

/// Whether a row range `rows` of a regrouped matrix is whole groups.
pub fn whole_groups(rows: &std::ops::Range<usize>) -> bool {
    rows.start.is_multiple_of(ROWS) && rows.len().is_multiple_of(ROWS)
}

/// Regroups the `ty` matrix `src` (`rows` rows, a multiple of eight, of `n_blocks`
/// super-blocks) into `dst` (as long). Whole groups can be regrouped independently: `src` and
/// `dst` may be the same group range of a larger matrix.
///
/// Panics if `ty` is not regrouped or the lengths disagree.
pub fn regroup_into(ty: GgmlType, src: &[u8], rows: usize, n_blocks: usize, dst: &mut [u8]) {
    let fl = fields(ty).unwrap_or_else(|| panic!("x8: {ty} is not regrouped"));
    assert!(rows.is_multiple_of(ROWS), "x8: {rows} rows");
    let bb = ty.block_bytes();
    let gb = ROWS * bb;
    assert_eq!(src.len(), rows * n_blocks * bb, "x8: source bytes");
    assert_eq!(dst.len(), src.len(), "x8: destination bytes");
    for (g, out) in dst.chunks_exact_mut(n_blocks * gb).enumerate() {
        for (sb, block) in out.chunks_exact_mut(gb).enumerate() {
            for r in 0..ROWS {
                let b = &src[((g * ROWS + r) * n_blocks + sb) * bb..][..bb];
                for f in fl {
                    for u in 0..f.units {
                        let to = (f.plane)(u) + r * f.unit;
                        block[to..to + f.unit].copy_from_slice(&b[f.src + u * f.unit..][..f.unit]);
                    }
                }
            }
        }
    }
}

/// The regrouped copy of the `ty` matrix `src` ([`regroup_into`]).
pub fn regroup(ty: GgmlType, src: &[u8], rows: usize, n_blocks: usize) -> Vec<u8> {
    let mut dst = vec![0u8; src.len()];
    regroup_into(ty, src, rows, n_blocks, &mut dst);
    dst
}

/// Row `row`'s original bytes (`n_blocks` blocks of `ty`) from the regrouped matrix `packed`.
pub fn unpack_row(ty: GgmlType, packed: &[u8], n_blocks: usize, row: usize, out: &mut [u8]) {
    let bb = ty.block_bytes();
    assert_eq!(out.len(), n_blocks * bb, "x8: row bytes");
    let gb = ROWS * bb;
    let (g, r) = (row / ROWS, row % ROWS);
    let group = &packed[g * n_blocks * gb..][..n_blocks * gb];
    for (block, o) in group.chunks_exact(gb).zip(out.chunks_exact_mut(bb)) {
        for (from, to) in scatter_offsets(ty, r) {
            o[from] = block[to];
        }
    }
}

/// The scalar reference: `out[r] = vec_dot(W[r], y)` for the regrouped rows, by reading each
/// row back. The SIMD kernels must give these bits.
pub fn matvec_ref(ty: GgmlType, packed: &[u8], n_blocks: usize, y: &[u8], out: &mut [f32]) {
    let mut row = vec![0u8; n_blocks * ty.block_bytes()];
    for (r, o) in out.iter_mut().enumerate() {
        unpack_row(ty, packed, n_blocks, r, &mut row);
        *o = super::vec_dot(ty, n_blocks * super::QK_K, &row, y);
    }
}

/// `out[r] = vec_dot(W[r], token)` for the regrouped rows `w` (`out.len()` rows) and the token
/// packed by `quant::pack_single` for their type.
///
/// Panics if the kernels in use have none ([`can_regroup`]) or the lengths disagree.
pub fn matvec(w: &[u8], acts: &PackedActs, out: &mut [f32]) {
    let ty = acts.ty;
    assert!(
        out.len().is_multiple_of(ROWS),
        "x8 matvec: {} rows",
        out.len()
    );
    assert_eq!(
        w.len(),
        out.len() * acts.n_blocks * ty.block_bytes(),
        "x8 matvec: weight bytes"
    );
    let f = dispatch::kernels().x8_matvec[dispatch::slot(ty)]
        .unwrap_or_else(|| panic!("x8 matvec: no kernel for {ty}"));
    f(w, acts, out);
}

/// `out[t · t_stride + r · r_stride] = vec_dot(W[r], x[t])` for the regrouped `ty` rows `w`
/// (`rows` rows of `n_blocks` super-blocks) and the Q8_K rows `qx`, back to back.
///
/// Panics if the kernels in use have none ([`can_regroup`]) or the lengths disagree.
#[allow(clippy::too_many_arguments)]
pub fn gemm(
    ty: GgmlType,
    w: &[u8],
    rows: usize,
    n_blocks: usize,
    qx: &[u8],
    out: &mut [f32],
    t_stride: usize,
    r_stride: usize,
) {
    assert!(rows.is_multiple_of(ROWS), "x8 gemm: {rows} rows");
    assert_eq!(
        w.len(),
        rows * n_blocks * ty.block_bytes(),
        "x8 gemm: weight bytes"
    );
    let row = n_blocks * std::mem::size_of::<BlockQ8K>();
    assert!(
        row > 0 && qx.len().is_multiple_of(row),
        "x8 gemm: activation bytes"
    );
    let ys: Vec<&[BlockQ8K]> = qx.chunks_exact(row).map(as_blocks).collect();
    if ys.is_empty() || rows == 0 {
        return;
    }
    let last = (ys.len() - 1) * t_stride + (rows - 1) * r_stride;
    assert!(out.len() > last, "x8 gemm: output too short");
    let f = dispatch::kernels().x8_gemm[dispatch::slot(ty)]
        .unwrap_or_else(|| panic!("x8 gemm: no kernel for {ty}"));
    f(w, rows, &ys, out, t_stride, r_stride);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn noise(n: usize, seed: u32) -> Vec<u8> {
        let mut x = seed | 1;
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                x as u8
            })
            .collect()
    }

    const TYPES: [GgmlType; 2] = [GgmlType::Q4K, GgmlType::Q6K];

    #[test]
    fn offsets_cover_the_group_block_once() {
        for ty in TYPES {
            let mut seen = vec![0u8; ROWS * ty.block_bytes()];
            for r in 0..ROWS {
                let offs: Vec<_> = scatter_offsets(ty, r).collect();
                assert_eq!(offs.len(), ty.block_bytes(), "{ty}");
                for (_, to) in offs {
                    seen[to] += 1;
                }
            }
            assert!(seen.iter().all(|&c| c == 1), "{ty}");
        }
    }

    #[test]
    fn regrouping_moves_bytes_where_the_offsets_say() {
        for ty in TYPES {
            let (rows, nb, bb) = (8, 2, ty.block_bytes());
            let src = noise(rows * nb * bb, 9);
            let packed = regroup(ty, &src, rows, nb);
            for r in 0..rows {
                for sb in 0..nb {
                    for (from, to) in scatter_offsets(ty, r) {
                        let b = src[(r * nb + sb) * bb + from];
                        assert_eq!(packed[sb * ROWS * bb + to], b, "{ty}");
                    }
                }
            }
        }
    }

    #[test]
    fn rows_read_back_as_written() {
        for ty in TYPES {
            let (rows, nb, bb) = (16, 3, ty.block_bytes());
            let src = noise(rows * nb * bb, 7);
            let packed = regroup(ty, &src, rows, nb);
            let mut row = vec![0u8; nb * bb];
            for r in 0..rows {
                unpack_row(ty, &packed, nb, r, &mut row);
                assert_eq!(row, src[r * nb * bb..][..nb * bb], "{ty} row {r}");
            }
        }
        // Q4_K row 9's d is the first two bytes of its second super-block in group 1.
        let src = noise(16 * 3 * 144, 7);
        let packed = regroup(GgmlType::Q4K, &src, 16, 3);
        let at = (3 + 1) * 1152 + 2;
        assert_eq!(packed[at..at + 2], src[(9 * 3 + 1) * 144..][..2]);
    }
}
