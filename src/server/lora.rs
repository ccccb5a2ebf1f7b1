//! LoRA adapters over HTTP, as llama-server serves them: `GET /lora-adapters` lists the
//! adapters of `--lora` (id, path, global scale, task name, prompt prefix), `POST
//! /lora-adapters` sets the global scales (`[{"id": 0, "scale": 0.5}]`; an adapter not listed
//! gets 0), and a generation request's `lora` field gives its own scales in the same form
//! (adapters not listed at 0), else it runs at the global ones. The scales a request runs at
//! are fixed when it is read; the scheduler never batches requests of different scales into
//! one forward pass. Unlike llama-server, an id that names no adapter is refused (400), not
//! ignored.

use super::error::ApiError;
use super::json::{kind, Obj};
use super::response::Response;
use crate::model::{LoraAdapter, LoraMix};
use serde_json::{json, Value};
use std::sync::{Arc, Mutex};

/// The loaded adapters and their global scales.
pub struct LoraState {
    adapters: Vec<Arc<LoraAdapter>>,
    global: Mutex<LoraMix>,
}

impl LoraState {
    /// The adapters of the model, at its scales (`--lora-scaled`, `--lora-init-without-apply`).
    pub fn new(adapters: Vec<Arc<LoraAdapter>>, initial: LoraMix) -> LoraState {
        LoraState {
            adapters,
            global: Mutex::new(initial),
        }
    }

    fn global(&self) -> LoraMix {
        self.global
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// `GET /lora-adapters`.
    pub fn list(&self) -> Response {
        let global = self.global();
        let list: Vec<Value> = self
            .adapters
            .iter()
            .enumerate()
            .map(|(id, a)| {
                json!({
                    "id": id,
                    "path": a.path,
                    "scale": global.scales.get(id).copied().unwrap_or(0.0),
                    "task_name": a.task_name,
                    "prompt_prefix": a.prompt_prefix,
                })
            })
            .collect();
        Response::json(200, &Value::Array(list))
    }

    /// `POST /lora-adapters`: the body is the new global scales.
    pub fn set(&self, body: &[u8]) -> Result<Response, ApiError> {
        let v: Value = serde_json::from_slice(body).map_err(|e| {
            ApiError::bad_request(format!("the request body is not valid JSON: {e}"))
        })?;
        let Value::Array(items) = &v else {
            return Err(ApiError::bad_request("Request body must be an array"));
        };
        let mix = self.mix(items, "")?;
        *self.global.lock().unwrap_or_else(|e| e.into_inner()) = mix;
        Ok(Response::json(200, &json!({ "success": true })))
    }

    /// The scales a generation request `o` runs at: its `lora` field, else the global ones;
    /// `None` when no adapter is loaded and the request names none.
    pub fn request_mix(&self, o: &Obj) -> Result<Option<LoraMix>, ApiError> {
        let field = o.path_of("lora");
        let mix = match o.get("lora") {
            None => self.global(),
            Some(Value::Array(items)) => self.mix(items, &field)?,
            Some(other) => {
                return Err(ApiError::field(
                    &field,
                    format!(
                        "expected an array of objects with 'id' and 'scale' fields, got {}",
                        kind(other)
                    ),
                ))
            }
        };
        Ok((!self.adapters.is_empty()).then_some(mix))
    }

    /// The adapters a request's `lora` field lists (already checked by
    /// [`LoraState::request_mix`]), in id order, each at its last scale: what llama-server
    /// shows as the request's `lora`.
    pub fn listed(o: &Obj) -> Vec<(usize, f32)> {
        let mut out = std::collections::BTreeMap::new();
        for item in o
            .get("lora")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            if let Some(id) = item.get("id").and_then(Value::as_u64) {
                let scale = item.get("scale").and_then(Value::as_f64).unwrap_or(0.0);
                out.insert(id as usize, scale as f32);
            }
        }
        out.into_iter().collect()
    }

    /// Scales from `[{"id": N, "scale": S}, ...]` at JSON path `path`: unlisted adapters at 0,
    /// a repeated id at its last scale.
    fn mix(&self, items: &[Value], path: &str) -> Result<LoraMix, ApiError> {
        let mut mix = LoraMix::uniform(self.adapters.len(), 0.0);
        for (i, item) in items.iter().enumerate() {
            let at = format!("{path}[{i}]");
            let o = Obj::at(item, &at)?;
            let id = o.int_in("id", 0..=i64::from(u32::MAX))?.ok_or_else(|| {
                ApiError::field(&o.path_of("id"), "missing: the adapter's id is required")
            })? as usize;
            if id >= self.adapters.len() {
                return Err(ApiError::field(
                    &o.path_of("id"),
                    format!(
                        "no LoRA adapter {id} (the server has {} loaded with --lora; see GET \
                         /lora-adapters)",
                        self.adapters.len()
                    ),
                ));
            }
            mix.scales[id] = o.f32_in("scale", -1e6..=1e6)?.unwrap_or(0.0);
        }
        Ok(mix)
    }
}
