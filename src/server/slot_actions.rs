//! `POST /slots/{id_slot}?action=save|restore|erase` (with `--slot-save-path DIR`): a slot's
//! cached prompt written to `DIR/filename`, loaded back from it (here or in a later process), or
//! forgotten, in llama-server's request and response shapes. The operation waits until the slot
//! is idle, as llama-server defers it; the scheduler runs it (`slot_file` holds the format).

use super::error::ApiError;
use super::json::{parse_body, Obj};
use super::protocol::{SlotDone, SlotOp};
use super::response::{Responder, Response};
use super::slot_file::check_filename;
use super::State;
use serde_json::{json, Value};
use std::sync::mpsc::RecvTimeoutError;
use std::time::Duration;

/// How often a waiting handler checks that its client is still there.
const CLIENT_CHECK: Duration = Duration::from_millis(100);

/// Answers `POST /slots/{id}` (`id`: the rest of the path) with the request's `query` and `body`.
pub fn handle(
    state: &State,
    id: &str,
    query: &str,
    body: &[u8],
    rsp: &mut Responder,
) -> Result<(), ApiError> {
    let Some(dir) = &state.config.slot_save_path else {
        return Err(ApiError::new(
            501,
            "not_supported_error",
            "this server does not save or restore slots: start it with --slot-save-path DIR",
        ));
    };
    let n_slots = state.scheduler.options.n_slots;
    let slot = id
        .parse::<usize>()
        .ok()
        .filter(|&i| i < n_slots && !id.starts_with('+'))
        .ok_or_else(|| {
            ApiError::field(
                "id_slot",
                format!(
                    "'{}' is not a slot of this server (its slots are 0 to {})",
                    printable(id),
                    n_slots - 1
                ),
            )
        })?;
    let (op, filename) = match query_param(query, "action") {
        Some("save") => {
            let name = filename(body)?;
            (SlotOp::Save(dir.join(&name)), Some(name))
        }
        Some("restore") => {
            let name = filename(body)?;
            (SlotOp::Restore(dir.join(&name)), Some(name))
        }
        Some("erase") => (SlotOp::Erase, None),
        Some(other) => {
            return Err(ApiError::field(
                "action",
                format!("'{}' is not one of save, restore, erase", printable(other)),
            ))
        }
        None => {
            return Err(ApiError::field(
                "action",
                "is required: ?action=save, restore or erase",
            ))
        }
    };
    let replies = state.scheduler.slot_action(slot, op.clone())?;
    let done = loop {
        match replies.recv_timeout(CLIENT_CHECK) {
            Ok(outcome) => break outcome?,
            Err(RecvTimeoutError::Timeout) => {
                if rsp.client_gone() {
                    return Ok(());
                }
            }
            Err(RecvTimeoutError::Disconnected) => {
                return Err(ApiError::internal("the scheduler has stopped"))
            }
        }
    };
    rsp.send(&Response::json(200, &answer(slot, &op, filename, done)))
        .map_err(ApiError::from)
}

/// llama-server's answer to each action.
fn answer(slot: usize, op: &SlotOp, filename: Option<String>, d: SlotDone) -> Value {
    match op {
        SlotOp::Save(_) => json!({
            "id_slot": slot,
            "filename": filename,
            "n_saved": d.n_tokens,
            "n_written": d.n_bytes,
            "timings": { "save_ms": d.ms },
        }),
        SlotOp::Restore(_) => json!({
            "id_slot": slot,
            "filename": filename,
            "n_restored": d.n_tokens,
            "n_read": d.n_bytes,
            "timings": { "restore_ms": d.ms },
        }),
        SlotOp::Erase => json!({ "id_slot": slot, "n_erased": d.n_tokens }),
    }
}

/// The request's `filename`, checked to be a plain name inside `--slot-save-path`.
fn filename(body: &[u8]) -> Result<String, ApiError> {
    let v = parse_body(body)?;
    let o = Obj::root(&v);
    let name = o
        .str("filename")?
        .ok_or_else(|| ApiError::field("filename", "is required"))?;
    check_filename(name).map_err(|problem| ApiError::field("filename", problem))?;
    Ok(name.to_string())
}

/// The value of `key` in a query string (`a=1&b=2`), undecoded.
fn query_param<'q>(query: &'q str, key: &str) -> Option<&'q str> {
    query
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .find(|(k, _)| *k == key)
        .map(|(_, v)| v)
}

/// A piece of the request shortened and stripped of anything odd before it goes into a message.
fn printable(s: &str) -> String {
    s.chars()
        .take(40)
        .map(|c| if c.is_ascii_graphic() { c } else { '?' })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::query_param;

    #[test]
    fn query_parameters() {
        assert_eq!(query_param("action=save", "action"), Some("save"));
        assert_eq!(query_param("x=1&action=erase", "action"), Some("erase"));
        assert_eq!(query_param("actions=save", "action"), None);
        assert_eq!(query_param("", "action"), None);
    }
}
