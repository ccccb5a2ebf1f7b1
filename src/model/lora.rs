//! LoRA adapters in llama.cpp's GGUF form (`general.type = adapter`, `adapter.type = lora`):
//! for each adapted weight `W` (`n_in` columns, `n_out` rows) a pair `W.lora_a` (`rank` rows of
//! `n_in`) and `W.lora_b` (`n_out` rows of `rank`), applied beside the weight as
//! `y = W·x + s·B·(A·x)` with `s = scale·alpha/rank` (`scale` alone when `alpha` is 0), as
//! llama.cpp's `build_lora_mm` does. The weights stay untouched: several adapters, each with
//! its own scale per forward pass ([`LoraMix`]), can run over the same model. Loading checks
//! the file against the model (architecture, names, shapes) and says what is wrong in one
//! line; applying them is the CPU backend's business (`backend/cpu/lora.rs`).

use super::{Attention, Ffn, Model, RowView, Tensor};
use crate::gguf::{GgufError, GgufFile};
use crate::quant::GgmlType;
use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::Arc;

/// Why an adapter could not be loaded. Every message names the file.
#[derive(Debug, thiserror::Error)]
pub enum LoraError {
    #[error("LoRA adapter {path}: {source}")]
    Gguf { path: String, source: GgufError },
    #[error(
        "LoRA adapter {path}: general.type is {found:?}, expected \"adapter\" (not a LoRA adapter)"
    )]
    NotAdapter { path: String, found: String },
    #[error("LoRA adapter {path}: adapter.type is {found:?}, expected \"lora\"")]
    NotLora { path: String, found: String },
    #[error("LoRA adapter {path}: architecture {found:?} does not match the model's {want:?}")]
    Arch {
        path: String,
        found: String,
        want: String,
    },
    #[error("LoRA adapter {path}: {key} is set (activated LoRA), which is not supported")]
    Activated { path: String, key: &'static str },
    #[error(
        "LoRA adapter {path}: tensor '{name}' has unexpected suffix (expected .lora_a or .lora_b)"
    )]
    Suffix { path: String, name: String },
    #[error("LoRA adapter {path}: tensor pair for '{name}' is missing its {missing}")]
    Incomplete {
        path: String,
        name: String,
        missing: &'static str,
    },
    #[error(
        "LoRA adapter {path}: tensor '{name}' does not exist in the model (wrong base model?)"
    )]
    NoSuchWeight { path: String, name: String },
    #[error(
        "LoRA adapter {path}: tensor '{name}' cannot be adapted here (supported: attention \
         q/k/v/output, dense feed-forward gate/up/down and the output head)"
    )]
    NotAdaptable { path: String, name: String },
    #[error(
        "LoRA adapter {path}: tensor '{name}' has shape {got:?}, expected {want} (wrong base model?)"
    )]
    Shape {
        path: String,
        name: String,
        got: Vec<u64>,
        want: String,
    },
    #[error(
        "LoRA adapter {path}: adapters run on the CPU backend only, and this model runs blocks \
         on {backend} (use -ngl 0 with --lora)"
    )]
    Backend { path: String, backend: String },
    #[error("LoRA adapter {path}: tensor '{name}' has type {ty}, which cannot be a weight")]
    Type {
        path: String,
        name: String,
        ty: GgmlType,
    },
}

/// One adapted weight: `a` is `rank × n_in`, `b` is `n_out × rank` (as matrices of rows).
#[derive(Clone, Debug)]
pub struct LoraPair {
    pub a: Tensor,
    pub b: Tensor,
}

impl LoraPair {
    /// The adapter's rank (`b`'s columns).
    pub fn rank(&self) -> usize {
        self.b.info.dims[0] as usize
    }
}

/// A loaded adapter: its file (mapped), `alpha`, and its pairs by the adapted weight's name.
pub struct LoraAdapter {
    /// The path as given (`GET /lora-adapters` shows it).
    pub path: String,
    pub alpha: f32,
    /// `adapter.lora.task_name` and `adapter.lora.prompt_prefix` (empty when absent).
    pub task_name: String,
    pub prompt_prefix: String,
    pub file: Arc<GgufFile>,
    pairs: HashMap<String, LoraPair>,
}

impl std::fmt::Debug for LoraAdapter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoraAdapter")
            .field("path", &self.path)
            .field("alpha", &self.alpha)
            .field("pairs", &self.pairs.len())
            .finish()
    }
}

impl LoraAdapter {
    /// Opens the adapter at `path` and checks it against `model`.
    pub fn open(path: &Path, model: &Model) -> Result<LoraAdapter, LoraError> {
        let shown = path.display().to_string();
        let file = GgufFile::open(path).map_err(|source| LoraError::Gguf {
            path: shown.clone(),
            source,
        })?;
        LoraAdapter::from_file(shown, Arc::new(file), model)
    }

    /// Checks the parsed adapter `file` (shown as `path` in messages) against `model`.
    pub fn from_file(
        path: String,
        file: Arc<GgufFile>,
        model: &Model,
    ) -> Result<LoraAdapter, LoraError> {
        let s = |key: &str| file.get_str(key).unwrap_or("").to_string();
        let general = s("general.type");
        if general != "adapter" {
            return Err(LoraError::NotAdapter {
                path,
                found: general,
            });
        }
        let (found, want) = (s("general.architecture"), model_arch(model));
        if found != want {
            return Err(LoraError::Arch { path, found, want });
        }
        let kind = s("adapter.type");
        if kind != "lora" {
            return Err(LoraError::NotLora { path, found: kind });
        }
        let key = "adapter.alora.invocation_tokens";
        if file.get(key).is_some() {
            return Err(LoraError::Activated { path, key });
        }
        let alpha = file.get_f32("adapter.lora.alpha").unwrap_or(0.0);

        // Pair the halves by the adapted weight's name.
        let mut halves: HashMap<String, (Option<Tensor>, Option<Tensor>)> = HashMap::new();
        for info in file.tensors() {
            let t = Tensor {
                info: info.clone(),
                x8: Default::default(),
            };
            if let Some(base) = info.name.strip_suffix(".lora_a") {
                halves.entry(base.to_string()).or_default().0 = Some(t);
            } else if let Some(base) = info.name.strip_suffix(".lora_b") {
                halves.entry(base.to_string()).or_default().1 = Some(t);
            } else if info.name.ends_with("_norm.weight") {
                // llama.cpp skips norm vectors in adapters too.
                continue;
            } else {
                return Err(LoraError::Suffix {
                    path,
                    name: info.name.clone(),
                });
            }
        }
        let adaptable = adaptable_weights(model);
        let mut names: Vec<&String> = halves.keys().collect();
        names.sort();
        let mut pairs = HashMap::new();
        for name in names {
            let (a, b) = &halves[name];
            let miss = |missing| LoraError::Incomplete {
                path: path.clone(),
                name: name.clone(),
                missing,
            };
            let a = a.clone().ok_or_else(|| miss("lora_a"))?;
            let b = b.clone().ok_or_else(|| miss("lora_b"))?;
            let Some(w) = model.file.tensor(name) else {
                return Err(LoraError::NoSuchWeight {
                    path,
                    name: name.clone(),
                });
            };
            if !adaptable.contains(name.as_str()) {
                return Err(LoraError::NotAdaptable {
                    path,
                    name: name.clone(),
                });
            }
            let (n_in, n_out) = (w.dims[0], w.dims[1..].iter().product::<u64>());
            let rank = b.info.dims.first().copied().unwrap_or(0);
            let shape = |t: &Tensor, want: String| -> Result<(), LoraError> {
                let ok = match t.info.dims.as_slice() {
                    [c, r] => format!("[{c}, {r}]") == want,
                    _ => false,
                };
                if ok {
                    return Ok(());
                }
                Err(LoraError::Shape {
                    path: path.clone(),
                    name: t.info.name.clone(),
                    got: t.info.dims.clone(),
                    want,
                })
            };
            if rank == 0 {
                return Err(LoraError::Shape {
                    path,
                    name: b.info.name.clone(),
                    got: b.info.dims.clone(),
                    want: format!("[rank > 0, {n_out}]"),
                });
            }
            shape(&b, format!("[{rank}, {n_out}]"))?;
            shape(&a, format!("[{n_in}, {rank}]"))?;
            for t in [&a, &b] {
                if matches!(t.info.ty, GgmlType::Q8_1 | GgmlType::Q8K) {
                    return Err(LoraError::Type {
                        path,
                        name: t.info.name.clone(),
                        ty: t.info.ty,
                    });
                }
            }
            pairs.insert(name.clone(), LoraPair { a, b });
        }
        Ok(LoraAdapter {
            path,
            alpha,
            task_name: s("adapter.lora.task_name"),
            prompt_prefix: s("adapter.lora.prompt_prefix"),
            file,
            pairs,
        })
    }

    /// The pair adapting the weight tensor named `name`, if this adapter has one.
    pub fn pair(&self, name: &str) -> Option<&LoraPair> {
        self.pairs.get(name)
    }

    /// Number of adapted weights.
    pub fn len(&self) -> usize {
        self.pairs.len()
    }

    /// True when the adapter adapts nothing.
    pub fn is_empty(&self) -> bool {
        self.pairs.is_empty()
    }

    /// The factor of `B·(A·x)` for `pair` at the user's `scale`, as llama.cpp computes it.
    pub fn factor(&self, pair: &LoraPair, scale: f32) -> f32 {
        if self.alpha != 0.0 {
            scale * self.alpha / pair.rank() as f32
        } else {
            scale
        }
    }
}

/// The scale of each loaded adapter for one forward pass, by adapter id (the order of
/// `--lora`); ids past the end and scales of 0 leave an adapter out.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LoraMix {
    pub scales: Vec<f32>,
}

impl LoraMix {
    /// Every adapter at `scale`.
    pub fn uniform(n: usize, scale: f32) -> LoraMix {
        LoraMix {
            scales: vec![scale; n],
        }
    }

    /// True when no adapter applies.
    pub fn is_off(&self) -> bool {
        self.scales.iter().all(|&s| s == 0.0)
    }
}

/// The architecture name of the model's file (what an adapter's must equal).
fn model_arch(model: &Model) -> String {
    model.file.architecture().unwrap_or("").to_string()
}

/// Names of the weight tensors the CPU backend applies adapters to: the attention projections
/// and dense feed-forward matrices of every block (fused ones by their one tensor), and the
/// output head when the model has its own.
fn adaptable_weights(model: &Model) -> HashSet<&str> {
    let mut names = HashSet::new();
    fn name(v: &RowView) -> &str {
        v.tensor.info.name.as_str()
    }
    let w = &model.weights;
    for layer in &w.layers {
        if let Attention::Mha(a) = &layer.attn {
            names.extend([name(&a.wq), name(&a.wk), name(&a.wv)]);
            names.insert(layer.wo.info.name.as_str());
        }
        if let Ffn::Dense(f) = &layer.ffn {
            names.extend([name(&f.gate), name(&f.up), name(&f.down)]);
        }
    }
    if w.output.info.name == "output.weight" {
        names.insert("output.weight");
    }
    names
}
