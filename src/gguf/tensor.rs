//! Tensor infos: name, shape, element type and data offset, read from the tensor-info section and
//! checked against the file (whole blocks, alignment, data inside the file). The tensor bytes
//! themselves are views handed out by `GgufFile::tensor_data`.

use std::collections::HashMap;

use super::cursor::{bounded_capacity, Ctx, Cursor};
use super::error::GgufError;
use crate::quant::GgmlType;

/// The most dimensions a GGUF tensor may have.
pub const MAX_DIMS: usize = 4;

/// One tensor's description. Parsed infos always satisfy: the element count fits `u64`, it is a
/// whole number of `ty` blocks, `offset` is aligned, and the data lies inside the file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorInfo {
    pub name: String,
    /// Sizes, innermost (contiguous) dimension first, as ggml orders them.
    pub dims: Vec<u64>,
    pub ty: GgmlType,
    /// Byte offset of the data from the start of the data section.
    pub offset: u64,
}

impl TensorInfo {
    /// Number of elements (the product of `dims`; 1 for zero dimensions).
    pub fn n_elements(&self) -> u64 {
        self.dims.iter().product()
    }

    /// Bytes the data takes.
    pub fn n_bytes(&self) -> u64 {
        self.ty
            .bytes_for(self.n_elements())
            .expect("a parsed tensor's element count is a whole number of blocks")
    }
}

/// The tensor infos in file order plus an index by name.
pub(crate) struct Tensors {
    pub infos: Vec<TensorInfo>,
    pub index: HashMap<String, usize>,
}

impl Tensors {
    /// Reads `n` tensor infos; `n` was already checked against the bytes left.
    pub fn read(cur: &mut Cursor<'_>, n: u64) -> Result<Tensors, GgufError> {
        let mut infos = Vec::with_capacity(bounded_capacity(n));
        let mut index = HashMap::with_capacity(bounded_capacity(n));
        for i in 0..n {
            cur.ctx = Ctx::TensorName(i);
            let name_at = cur.pos();
            let name = cur.string_strict()?;
            if index.contains_key(&name) {
                return Err(GgufError::DuplicateTensor {
                    tensor: name,
                    offset: name_at,
                });
            }
            cur.ctx = Ctx::Tensor(name.clone());
            let info = read_info(cur, name)?;
            index.insert(info.name.clone(), infos.len());
            infos.push(info);
        }
        Ok(Tensors { infos, index })
    }

    /// Checks every tensor's offset against `alignment` and its data against the GGUF's `size`.
    pub fn check_layout(
        &self,
        data_offset: u64,
        alignment: u64,
        size: u64,
    ) -> Result<(), GgufError> {
        for t in &self.infos {
            if !t.offset.is_multiple_of(alignment) {
                return Err(GgufError::MisalignedTensor {
                    tensor: t.name.clone(),
                    offset: t.offset,
                    alignment,
                });
            }
            let end = u128::from(data_offset) + u128::from(t.offset) + u128::from(t.n_bytes());
            if end > u128::from(size) {
                return Err(GgufError::TensorPastEnd {
                    tensor: t.name.clone(),
                    end,
                    size,
                });
            }
        }
        Ok(())
    }
}

fn read_info(cur: &mut Cursor<'_>, name: String) -> Result<TensorInfo, GgufError> {
    let n_dims_at = cur.pos();
    let n_dims = cur.u32()?;
    if n_dims as usize > MAX_DIMS {
        return Err(GgufError::TooManyDims {
            tensor: name,
            n_dims,
            max: MAX_DIMS,
            offset: n_dims_at,
        });
    }
    let mut dims = Vec::with_capacity(n_dims as usize);
    for _ in 0..n_dims {
        dims.push(cur.u64()?);
    }
    let type_at = cur.pos();
    let type_id = cur.u32()?;
    let offset = cur.u64()?;
    let Some(ty) = GgmlType::from_id(type_id) else {
        return Err(GgufError::UnknownTensorType {
            tensor: name,
            type_id,
            offset: type_at,
        });
    };
    let Some(n_elements) = dims.iter().try_fold(1u64, |acc, &d| acc.checked_mul(d)) else {
        return Err(GgufError::ShapeOverflow { tensor: name, dims });
    };
    if !n_elements.is_multiple_of(ty.block_elems() as u64) {
        return Err(GgufError::NotWholeBlocks {
            tensor: name,
            n_elements,
            ty: ty.name(),
            block_elems: ty.block_elems(),
        });
    }
    if ty.bytes_for(n_elements).is_none() {
        return Err(GgufError::ShapeOverflow { tensor: name, dims });
    }
    Ok(TensorInfo {
        name,
        dims,
        ty,
        offset,
    })
}
