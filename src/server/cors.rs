//! Cross-origin requests: which browser pages on other sites may call the API
//! (`--cors-origins`), and the `Access-Control-*` headers they get, as llama-server sends them:
//! the page's `Origin` echoed back on every answer, and a preflight `OPTIONS` answered 200 with
//! the allowed methods, headers and credentials, without an API key.
//!
//! Unlike llama-server, whose default is `*`, no other site is allowed unless the flag says so:
//! a server on 127.0.0.1 is reachable from every page the user's browser opens, so by default
//! only the server's own pages may drive it (see `routes::check_origin`).

/// The cross-origin policy.
#[derive(Clone, Debug, Default)]
pub struct Cors {
    origins: Origins,
    methods: String,
    headers: String,
    credentials: bool,
}

#[derive(Clone, Debug, Default)]
enum Origins {
    /// Only the server's own pages (no `--cors-origins`).
    #[default]
    Own,
    /// `*`: every origin.
    Any,
    /// `localhost`: pages served from this machine.
    Localhost,
    /// These origins exactly (scheme, host and port).
    List(Vec<String>),
}

impl Cors {
    /// The policy from `--cors-origins` (`None`: own pages only), `--cors-methods`,
    /// `--cors-headers` and `--cors-credentials`.
    pub fn new(origins: Option<&str>, methods: &str, headers: &str, credentials: bool) -> Cors {
        let list = crate::cli::split_list(origins);
        let origins = match (origins, list.as_slice()) {
            (None, _) => Origins::Own,
            (Some(_), l) if l.iter().any(|o| o == "*") => Origins::Any,
            (Some(_), [one]) if one == "localhost" => Origins::Localhost,
            (Some(_), l) => Origins::List(
                l.iter()
                    .map(|o| o.trim_end_matches('/').to_ascii_lowercase())
                    .collect(),
            ),
        };
        Cors {
            origins,
            methods: methods.to_string(),
            headers: headers.to_string(),
            credentials,
        }
    }

    /// Whether a page at `origin` (another site's) may call the API.
    pub fn allows(&self, origin: &str) -> bool {
        match &self.origins {
            Origins::Own => false,
            Origins::Any => true,
            Origins::Localhost => is_localhost(origin),
            Origins::List(l) => {
                let o = origin.trim_end_matches('/').to_ascii_lowercase();
                l.contains(&o)
            }
        }
    }

    /// Headers for an answer to a page at `origin`: the origin echoed back (it was checked
    /// by [`Cors::allows`] or is the server's own, and the HTTP layer admits no control
    /// characters in headers) and, with credentials allowed, `Allow-Credentials`.
    pub fn answer_headers(&self, origin: &str) -> Vec<(&'static str, String)> {
        let mut h = vec![
            ("Access-Control-Allow-Origin", origin.to_string()),
            ("Vary", "Origin".to_string()),
        ];
        if self.credentials {
            h.push(("Access-Control-Allow-Credentials", "true".to_string()));
        }
        h
    }

    /// Headers for a preflight answer: the above, and the methods and headers allowed.
    pub fn preflight_headers(&self, origin: &str) -> Vec<(&'static str, String)> {
        let mut h = self.answer_headers(origin);
        h.push(("Access-Control-Allow-Methods", self.methods.clone()));
        h.push(("Access-Control-Allow-Headers", self.headers.clone()));
        h.push(("Access-Control-Max-Age", "86400".to_string()));
        h
    }
}

/// Whether `origin` (`http://localhost:3000`) names this machine.
fn is_localhost(origin: &str) -> bool {
    let rest = origin
        .strip_prefix("http://")
        .or_else(|| origin.strip_prefix("https://"))
        .unwrap_or("");
    let host = if let Some(v6) = rest.strip_prefix('[') {
        v6.split(']').next().unwrap_or("")
    } else {
        rest.split([':', '/']).next().unwrap_or("")
    };
    matches!(
        host.to_ascii_lowercase().as_str(),
        "localhost" | "127.0.0.1" | "::1"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origin_lists() {
        let own = Cors::new(None, "GET", "*", true);
        assert!(!own.allows("http://example.com"));
        let any = Cors::new(Some("*"), "GET", "*", true);
        assert!(any.allows("http://example.com"));
        let local = Cors::new(Some("localhost"), "GET", "*", true);
        assert!(local.allows("http://localhost:3000"));
        assert!(local.allows("http://[::1]:3000"));
        assert!(!local.allows("http://localhost.example.com"));
        let list = Cors::new(
            Some("http://a.example, https://b.example:8443/"),
            "GET",
            "*",
            false,
        );
        assert!(list.allows("https://B.example:8443"));
        assert!(!list.allows("http://c.example"));
        assert!(!list
            .answer_headers("http://a.example")
            .iter()
            .any(|(n, _)| *n == "Access-Control-Allow-Credentials"));
    }
}
