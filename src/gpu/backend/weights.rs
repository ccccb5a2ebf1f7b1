//! A model's weights on the device, kept in their GGUF block layout: each matrix is its bytes
//! copied as they are in the file, with the name of the kernels that read its type. Norms and
//! biases go up as f32. Owns which types the kernels read (those of `gpu-src/quant.cuh`) and
//! the refusal of anything else, with the tensor named; not the math.

use crate::gpu::{Device, DeviceBuffer, GpuError};
use crate::ops::QMat;
use crate::quant::GgmlType;

/// Why a model's weights cannot go to the device.
#[derive(Debug, thiserror::Error)]
pub enum WeightsError {
    #[error("{tensor} is {ty:?}, which the CUDA kernels do not read")]
    UnsupportedType { tensor: String, ty: GgmlType },
    #[error("{tensor} has {cols} columns, not a multiple of 32")]
    Columns { tensor: String, cols: usize },
    #[error("mixture-of-experts blocks have no CUDA kernels yet")]
    Experts,
    #[error("multi-head latent attention (deepseek2) has no CUDA kernels yet")]
    LatentAttention,
    #[error("YaRN RoPE scaling has no CUDA kernel yet")]
    Yarn,
    #[error("heads of {0} dimensions (the attention kernel takes up to 256)")]
    HeadDim(usize),
    #[error("uploading {tensor}: {error}")]
    Upload { tensor: String, error: GpuError },
}

impl WeightsError {
    /// The message without block `il`'s prefix on the tensor's name (`ffn_down is Q5_1, ...`
    /// for `blk.7.ffn_down`), so that blocks refused for the same reason say it alike.
    pub fn in_any_block(&self, il: usize) -> String {
        let text = self.to_string();
        match text.strip_prefix(&format!("blk.{il}.")) {
            Some(rest) => rest.to_string(),
            None => text,
        }
    }
}

/// The kernel-name suffix for weights of type `ty` (`matvec_q4_k`), if the kernels read it.
pub fn kernel_suffix(ty: GgmlType) -> Option<&'static str> {
    Some(match ty {
        GgmlType::F32 => "f32",
        GgmlType::F16 => "f16",
        GgmlType::Q4_0 => "q4_0",
        GgmlType::Q4_1 => "q4_1",
        GgmlType::Q5_0 => "q5_0",
        GgmlType::Q8_0 => "q8_0",
        GgmlType::Q4K => "q4_k",
        GgmlType::Q5K => "q5_k",
        GgmlType::Q6K => "q6_k",
        _ => return None,
    })
}

/// A weight matrix on the device.
pub struct DeviceMatrix {
    pub buf: DeviceBuffer,
    pub rows: usize,
    pub cols: usize,
    /// [`kernel_suffix`] of its type.
    pub suffix: &'static str,
}

/// Checks that the kernels can read `m` (named `tensor` in messages).
pub fn check_matrix(tensor: &str, m: &QMat) -> Result<&'static str, WeightsError> {
    let suffix = kernel_suffix(m.ty).ok_or_else(|| WeightsError::UnsupportedType {
        tensor: tensor.to_string(),
        ty: m.ty,
    })?;
    // Float rows may end in a partial unit of 32 (the kernels' deq_unit); quantized ones may not.
    if !m.cols.is_multiple_of(32) && !matches!(m.ty, GgmlType::F32 | GgmlType::F16) {
        return Err(WeightsError::Columns {
            tensor: tensor.to_string(),
            cols: m.cols,
        });
    }
    Ok(suffix)
}

/// Copies `m`'s bytes to the device as they are.
pub fn upload_matrix(dev: &Device, tensor: &str, m: &QMat) -> Result<DeviceMatrix, WeightsError> {
    let suffix = check_matrix(tensor, m)?;
    let buf = dev.upload(m.data).map_err(|error| WeightsError::Upload {
        tensor: tensor.to_string(),
        error,
    })?;
    Ok(DeviceMatrix {
        buf,
        rows: m.rows,
        cols: m.cols,
        suffix,
    })
}

/// `v` as f32 bytes on the device.
pub fn upload_f32(dev: &Device, tensor: &str, v: &[f32]) -> Result<DeviceBuffer, WeightsError> {
    dev.upload(&f32_bytes(v))
        .map_err(|error| WeightsError::Upload {
            tensor: tensor.to_string(),
            error,
        })
}

/// Little-endian bytes of `v`.
pub fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// Floats from little-endian bytes.
pub fn f32_from_bytes(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kernels_read_the_types_the_issue_asks_for_and_refuse_others_by_name() {
        for ty in [
            GgmlType::Q4_0,
            GgmlType::Q4_1,
            GgmlType::Q5_0,
            GgmlType::Q8_0,
            GgmlType::Q4K,
            GgmlType::Q5K,
            GgmlType::Q6K,
            GgmlType::F16,
            GgmlType::F32,
        ] {
            let suffix = kernel_suffix(ty).unwrap();
            // Each suffix names kernels that exist in the embedded PTX.
            for family in ["matvec", "matmul", "get_rows"] {
                let entry = format!(".entry {family}_{suffix}(");
                assert!(
                    crate::gpu::kernels::MODULES
                        .iter()
                        .any(|m| m.ptx.contains(&entry)),
                    "{entry} missing"
                );
            }
        }
        let m = QMat {
            ty: GgmlType::Q3K,
            rows: 1,
            cols: 256,
            data: &[],
            x8: None,
        };
        assert_eq!(
            check_matrix("blk.0.ffn_down.weight", &m)
                .unwrap_err()
                .to_string(),
            "blk.0.ffn_down.weight is Q3K, which the CUDA kernels do not read"
        );
        // Float rows may end in a partial unit of 32; quantized ones may not.
        for (ty, ok) in [
            (GgmlType::F32, true),
            (GgmlType::F16, true),
            (GgmlType::Q8_0, false),
        ] {
            let m = QMat {
                ty,
                rows: 1,
                cols: 40,
                data: &[],
                x8: None,
            };
            match check_matrix("t", &m) {
                Ok(_) => assert!(ok, "{ty:?}"),
                Err(e) => {
                    assert!(!ok, "{ty:?}: {e}");
                    assert!(matches!(e, WeightsError::Columns { cols: 40, .. }));
                }
            }
        }
    }

    #[test]
    fn a_reason_without_the_block_reads_the_same_for_every_block() {
        let m = QMat {
            ty: GgmlType::Q5_1,
            rows: 1,
            cols: 64,
            data: &[],
            x8: None,
        };
        for il in [1, 12] {
            let e = check_matrix(&format!("blk.{il}.ffn_down"), &m).unwrap_err();
            assert_eq!(
                e.in_any_block(il),
                "ffn_down is Q5_1, which the CUDA kernels do not read"
            );
        }
        // Another block's prefix, or none, stays.
        let e = check_matrix("blk.10.ffn_down", &m).unwrap_err();
        assert!(e.in_any_block(1).starts_with("blk.10.ffn_down is"));
        assert_eq!(
            WeightsError::Experts.in_any_block(3),
            WeightsError::Experts.to_string()
        );
    }

    #[test]
    fn floats_round_trip_through_bytes() {
        let v = [1.5f32, -0.0, f32::MAX, 3e-39];
        assert_eq!(f32_from_bytes(&f32_bytes(&v)), v);
    }
}
