//! A reranker's classification head, as llama.cpp loads it for a decoder: `cls.output.weight`
//! (`[n_embd, n_cls_out]`), one row per label of `{arch}.classifier.output_labels` (one output
//! when the file names none). Qwen3 rerankers carry it (the "yes" and "no" rows of the language
//! model's head, as llama.cpp's converter extracts them); rank pooling reads the last token's
//! hidden state through it (`crate::embedding`). Other architectures load no head, so a file
//! that has one for them is refused as an unused tensor.

use super::weights::Lookup;
use super::{Arch, Config, ModelError, Tensor};

/// The tensor name llama.cpp gives the head.
pub const CLS_OUT: &str = "cls.output.weight";

/// A classification head over the final hidden state.
#[derive(Clone, Debug)]
pub struct Classifier {
    /// `n_cls_out` rows of `n_embd`.
    pub out: Tensor,
    /// The outputs' names (`yes`, `no` for Qwen3 rerankers); may be empty.
    pub labels: Vec<String>,
    /// Whether the outputs go through a softmax (llama.cpp does this for Qwen3 only).
    pub softmax: bool,
}

impl Classifier {
    /// The number of outputs.
    pub fn n_out(&self) -> usize {
        self.out.info.dims[1] as usize
    }
}

/// The head of `cfg`'s model when its architecture has one and the file carries it.
pub(super) fn load(l: &Lookup<'_>, cfg: &Config) -> Result<Option<Classifier>, ModelError> {
    if cfg.arch != Arch::Qwen3 || l.file.tensor(CLS_OUT).is_none() {
        return Ok(None);
    }
    let key = format!("{}.classifier.output_labels", cfg.arch.name());
    let labels = match l.file.get(&key) {
        None => Vec::new(),
        Some(_) => l
            .file
            .get_str_array(&key)
            .ok_or_else(|| {
                ModelError::BadValue(key.clone(), "expected an array of strings".into())
            })?
            .to_vec(),
    };
    let n_out = labels.len().max(1);
    Ok(Some(Classifier {
        out: l.tensor(CLS_OUT, &[cfg.n_embd, n_out])?,
        labels,
        softmax: true,
    }))
}
