//! Images in requests, as llama-server takes them with `--mmproj`: OpenAI chat `image_url`
//! content parts (base64 `data:` URLs, or bare base64; this server is offline and fetches no
//! URL) become media markers in the message text, and their images are encoded (once per
//! distinct bytes, [`Media::image`]) and placed where the rendered prompt has the markers. The
//! prompt's images ride on the job's [`GenParams::media`] to the scheduler, which feeds them
//! as embedding rows. Errors name the content part (`messages[0].content[1].image_url`).

use std::sync::Arc;

use serde_json::Value;

use super::base64;
use super::error::ApiError;
use super::json::Obj;
use super::protocol::GenParams;
use super::State;
use crate::engine::media::{Image, Media, MediaPrompt, MEDIA_MARKER};

/// llama-server's answer to an image sent to a server without a projector.
pub const NO_PROJECTOR: &str =
    "image input is not supported - hint: if this is unexpected, you may need to provide the mmproj";

/// The text of a message's content parts (at `path`): `text` parts joined, each `image_url`
/// part a media marker.
pub fn content_text(parts: &[Value], path: &str) -> Result<String, ApiError> {
    let mut text = String::new();
    for (j, part) in parts.iter().enumerate() {
        let ppath = format!("{path}[{j}]");
        let p = Obj::at(part, &ppath)?;
        match p.kind_of(&["text", "image_url"], "parts")? {
            "image_url" => text.push_str(MEDIA_MARKER),
            _ => text.push_str(p.required_str("text")?),
        }
    }
    Ok(text)
}

/// The images of a chat request's messages, in order, encoded.
pub fn chat_images(state: &State, o: &Obj) -> Result<Vec<Arc<Image>>, ApiError> {
    let mut out = Vec::new();
    let Some(Value::Array(messages)) = o.get("messages") else {
        return Ok(out);
    };
    for (i, m) in messages.iter().enumerate() {
        let Some(Value::Array(parts)) = m.get("content") else {
            continue;
        };
        for (j, part) in parts.iter().enumerate() {
            if part.get("type").and_then(Value::as_str) != Some("image_url") {
                continue;
            }
            let path = format!("messages[{i}].content[{j}]");
            let media = state
                .media
                .as_deref()
                .ok_or_else(|| ApiError::field(&path, NO_PROJECTOR))?;
            let url = part
                .get("image_url")
                .and_then(|u| u.get("url"))
                .and_then(Value::as_str)
                .ok_or_else(|| {
                    ApiError::field(&format!("{path}.image_url.url"), "is required (a string)")
                })?;
            let path = format!("{path}.image_url");
            out.push(image(media, &url_bytes(url, &path)?, &path)?);
        }
    }
    Ok(out)
}

/// The bytes of an image URL: a base64 `data:image/...;base64,` URL, or bare base64.
pub fn url_bytes(url: &str, path: &str) -> Result<Vec<u8>, ApiError> {
    let fail = |m: String| ApiError::field(path, m);
    if url.starts_with("http://") || url.starts_with("https://") {
        return Err(fail(
            "this server is offline and does not fetch URLs: send the image as a base64 data: URL"
                .into(),
        ));
    }
    if url.starts_with("file://") {
        return Err(fail(
            "file:// URLs are not read: send the image as a base64 data: URL".into(),
        ));
    }
    let data = match url.strip_prefix("data:") {
        Some(rest) => {
            let Some((head, data)) = rest.split_once(',') else {
                return Err(fail("Invalid uri-encoded base64 value".into()));
            };
            if !head.starts_with("image/") {
                return Err(fail(format!(
                    "Invalid uri format: data:{head} (expected data:image/...)"
                )));
            }
            if !head.ends_with("base64") {
                return Err(fail("uri must be base64 encoded".into()));
            }
            data
        }
        None => url,
    };
    let bytes = base64::decode(data).map_err(|e| fail(format!("Invalid base64 value: {e}")))?;
    if bytes.is_empty() {
        return Err(fail("Invalid base64 value: no data".into()));
    }
    Ok(bytes)
}

/// `bytes` encoded, with errors at `path`.
pub fn image(media: &Media, bytes: &[u8], path: &str) -> Result<Arc<Image>, ApiError> {
    media
        .image(bytes)
        .map_err(|e| ApiError::field(path, e.to_string()))
}

/// The prompt tokens of `text` (rendered with media markers for `images`): plain tokens
/// without images; with images, one position per image token, and the images put on `params`
/// for the scheduler. `field` names the request field in errors.
pub fn prompt_tokens(
    state: &State,
    text: &str,
    images: Vec<Arc<Image>>,
    params: &mut GenParams,
    field: &str,
) -> Result<Vec<u32>, ApiError> {
    let tok = &state.loaded.tokenizer;
    let Some(media) = state.media.as_deref().filter(|_| !images.is_empty()) else {
        return Ok(tok.encode(text, true, true));
    };
    let prompt = media
        .tokenize(tok, text, &images, true)
        .map_err(|e| ApiError::field(field, e.to_string()))?;
    let tokens = prompt.tokens();
    params.media = Some(Arc::new(prompt));
    Ok(tokens)
}

/// A prompt's tokens (media tokens at the images' positions) and its chunks.
pub type PromptWithImages = (Vec<u32>, Arc<MediaPrompt>);

/// llama-server's `/completion` prompt object with pictures, `{"prompt_string": TEXT,
/// "multimodal_data": [BASE64, ...]}`: TEXT's media markers replaced by the pictures, in order.
/// `None` when the prompt is anything else.
pub fn completion_prompt(
    state: &State,
    v: Option<&Value>,
) -> Result<Option<PromptWithImages>, ApiError> {
    let Some(Value::Object(map)) = v else {
        return Ok(None);
    };
    let Some(data) = map.get("multimodal_data") else {
        return Ok(None);
    };
    let media = state.media.as_deref().ok_or_else(|| {
        ApiError::field(
            "prompt.multimodal_data",
            "Multimodal data provided, but model does not support multimodal requests.",
        )
    })?;
    let Value::Array(items) = data else {
        return Err(ApiError::field(
            "prompt.multimodal_data",
            "expected an array of base64 strings",
        ));
    };
    let mut images = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let path = format!("prompt.multimodal_data[{i}]");
        let Value::String(b64) = item else {
            return Err(ApiError::field(&path, "expected a base64 string"));
        };
        images.push(image(media, &url_bytes(b64, &path)?, &path)?);
    }
    let Some(Value::String(text)) = map.get("prompt_string") else {
        return Err(ApiError::field(
            "prompt.prompt_string",
            "is required (a string, with a media marker where each picture goes)",
        ));
    };
    let prompt = media
        .tokenize(&state.loaded.tokenizer, text, &images, true)
        .map_err(|e| ApiError::field("prompt.prompt_string", e.to_string()))?;
    Ok(Some((prompt.tokens(), Arc::new(prompt))))
}

/// `/props`' `modalities`, as llama-server reports them.
pub fn modalities(state: &State) -> Value {
    serde_json::json!({ "vision": state.media.is_some(), "video": false, "audio": false })
}
