//! `--path DIR`: the files of a directory served over `GET`/`HEAD` (under `--api-prefix`), as
//! llama-server mounts its `--path` at `/`: a request path names a file below `DIR` (a path
//! ending in `/` names that directory's `index.html`), and a file found there answers before
//! any endpoint. Paths are percent-decoded; a `..` segment is refused, and so is a file whose
//! real location (after symbolic links) lies outside `DIR`.

use super::error::ApiError;
use super::response::Response;
use std::path::{Path, PathBuf};

/// Files larger than this are not served.
const MAX_FILE: u64 = 256 << 20;

/// The file of `dir` that request path `path` (already stripped of the API prefix) names:
/// `Ok(None)` when there is none, an error for a path that tries to leave `dir`.
pub fn lookup(dir: &Path, path: &str) -> Result<Option<PathBuf>, ApiError> {
    let decoded = percent_decode(path).ok_or_else(|| {
        ApiError::bad_request("the path has a malformed %-escape or is not UTF-8")
    })?;
    let mut file = dir.to_path_buf();
    for segment in decoded.split('/').filter(|s| !s.is_empty() && *s != ".") {
        if segment == ".." || segment.contains(['\\', '\0']) {
            return Err(ApiError::new(
                403,
                "permission_error",
                "the path leaves the --path directory ('..' or a backslash in it)",
            ));
        }
        file.push(segment);
    }
    if decoded.ends_with('/') || decoded.is_empty() {
        file.push("index.html");
    }
    let Ok(real) = file.canonicalize() else {
        return Ok(None);
    };
    let root = dir.canonicalize().map_err(ApiError::from)?;
    if !real.starts_with(&root) {
        return Err(ApiError::new(
            403,
            "permission_error",
            "the path leads outside the --path directory (a symbolic link)",
        ));
    }
    Ok(real.is_file().then_some(real))
}

/// The response for `file`.
pub fn serve(file: &Path) -> Result<Response, ApiError> {
    let len = std::fs::metadata(file)?.len();
    if len > MAX_FILE {
        return Err(ApiError::new(
            413,
            "invalid_request_error",
            format!("the file is larger than {} MiB", MAX_FILE >> 20),
        ));
    }
    let body = std::fs::read(file)?;
    Ok(Response::text(200, content_type(file), body))
}

/// The `Content-Type` for a file's extension.
fn content_type(file: &Path) -> &'static str {
    let ext = file
        .extension()
        .map(|e| e.to_string_lossy().to_ascii_lowercase())
        .unwrap_or_default();
    match ext.as_str() {
        "html" | "htm" => "text/html; charset=utf-8",
        "css" => "text/css; charset=utf-8",
        "js" | "mjs" => "text/javascript; charset=utf-8",
        "json" | "map" => "application/json",
        "txt" | "md" => "text/plain; charset=utf-8",
        "xml" => "application/xml",
        "svg" => "image/svg+xml",
        "png" => "image/png",
        "jpg" | "jpeg" => "image/jpeg",
        "gif" => "image/gif",
        "webp" => "image/webp",
        "ico" => "image/x-icon",
        "wasm" => "application/wasm",
        "woff" => "font/woff",
        "woff2" => "font/woff2",
        "ttf" => "font/ttf",
        "pdf" => "application/pdf",
        _ => "application/octet-stream",
    }
}

/// `%XX` escapes decoded; `None` for a malformed escape or bytes that are not UTF-8.
fn percent_decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decoding() {
        assert_eq!(percent_decode("/a%20b").as_deref(), Some("/a b"));
        assert_eq!(percent_decode("/%2e%2E/x").as_deref(), Some("/../x"));
        assert_eq!(percent_decode("/%zz"), None);
        assert_eq!(percent_decode("/%4"), None);
        assert_eq!(percent_decode("/%ff"), None);
    }

    #[test]
    fn lookups_stay_inside_the_directory() {
        let dir = std::env::temp_dir().join(format!("llamafile-static-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("sub")).unwrap();
        std::fs::write(dir.join("index.html"), "<p>hi</p>").unwrap();
        std::fs::write(dir.join("sub/a b.css"), "p{}").unwrap();
        assert_eq!(
            lookup(&dir, "/").unwrap(),
            Some(dir.join("index.html").canonicalize().unwrap())
        );
        assert!(lookup(&dir, "/sub/a%20b.css").unwrap().is_some());
        assert_eq!(lookup(&dir, "/missing.js").unwrap(), None);
        // A directory without index.html is not a file.
        assert_eq!(lookup(&dir, "/sub/").unwrap(), None);
        assert_eq!(lookup(&dir, "/sub").unwrap(), None);
        for bad in ["/../etc/passwd", "/sub/%2e%2e/%2e%2e/x", "/a%5c..%5cb"] {
            assert_eq!(lookup(&dir, bad).unwrap_err().status, 403, "{bad}");
        }
        #[cfg(unix)]
        {
            let _ = std::os::unix::fs::symlink("/etc", dir.join("out"));
            assert!(std::path::Path::new("/etc/passwd").exists());
            assert_eq!(lookup(&dir, "/out/passwd").unwrap_err().status, 403);
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
