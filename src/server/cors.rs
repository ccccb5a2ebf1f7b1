//! Cross-origin requests: which browser pages on other sites may call the API
//! (`--cors-origins`), and the `Access-Control-*` headers answers carry, as llama-server sends
//! them. With no `--cors-origins` every origin is allowed (llama-server's `*`): a page's
//! `Origin` is echoed back with credentials allowed, and a preflight `OPTIONS` to any path is
//! answered 200 with the allowed methods and headers, without an API key. `localhost` echoes
//! only the origins of this machine; a list echoes the origins it names.
//!
//! Beyond llama-server: a request (not a preflight) from an origin the policy does not allow is
//! refused with a 403 rather than served without the header, since a browser sends some
//! cross-origin POSTs without asking first (see `routes::check_origin`).

/// The cross-origin policy.
#[derive(Clone, Debug)]
pub struct Cors {
    origins: Origins,
    methods: String,
    headers: String,
    credentials: bool,
}

#[derive(Clone, Debug)]
enum Origins {
    /// `*` (the default): every origin.
    Any,
    /// `localhost`: pages served from this machine.
    Localhost,
    /// These origins (scheme, host and port, lowercased), and the flag's text, which answers
    /// the origins not in it as llama-server answers every origin.
    List(Vec<String>, String),
}

impl Default for Cors {
    fn default() -> Cors {
        Cors::new(None, "GET, POST, DELETE, OPTIONS", "*", true)
    }
}

impl Cors {
    /// The policy from `--cors-origins` (`None`: `*`), `--cors-methods`, `--cors-headers` and
    /// `--cors-credentials`.
    pub fn new(origins: Option<&str>, methods: &str, headers: &str, credentials: bool) -> Cors {
        let text = origins.unwrap_or("*");
        let list = crate::cli::split_list(Some(text));
        let origins = match list.as_slice() {
            l if l.iter().any(|o| o == "*") => Origins::Any,
            [one] if one == "localhost" => Origins::Localhost,
            l => Origins::List(
                l.iter()
                    .map(|o| o.trim_end_matches('/').to_ascii_lowercase())
                    .collect(),
                text.to_string(),
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
            Origins::Any => true,
            Origins::Localhost => is_localhost(origin),
            Origins::List(l, _) => l.contains(&origin.trim_end_matches('/').to_ascii_lowercase()),
        }
    }

    /// The `Access-Control-Allow-Origin` value for a page at `origin`, as llama-server picks it:
    /// the origin itself where allowed (`*` without credentials), nothing for a foreign origin
    /// under `localhost`, and the flag's text for one a list does not name.
    fn allow_origin(&self, origin: &str) -> Option<String> {
        match &self.origins {
            Origins::Any if self.credentials => Some(origin.to_string()),
            Origins::Any => Some("*".to_string()),
            Origins::Localhost => is_localhost(origin).then(|| origin.to_string()),
            Origins::List(..) if self.allows(origin) => Some(origin.to_string()),
            Origins::List(_, text) => Some(text.clone()).filter(|t| !t.is_empty()),
        }
    }

    /// Headers for an answer to a page at `origin` (allowed, or the server's own; the HTTP
    /// layer admits no control characters in headers): the Allow-Origin llama-server sends,
    /// and with credentials allowed, `Allow-Credentials` (which a browser needs on the answer
    /// as well as on the preflight to hand a credentialed answer to the page).
    pub fn answer_headers(&self, origin: &str) -> Vec<(&'static str, String)> {
        let mut h = Vec::new();
        if let Some(allowed) = self.allow_origin(origin) {
            if allowed != "*" {
                h.push(("Vary", "Origin".to_string()));
            }
            h.push(("Access-Control-Allow-Origin", allowed));
        }
        if self.credentials {
            h.push(("Access-Control-Allow-Credentials", "true".to_string()));
        }
        h
    }

    /// Headers for the answer to a preflight from `origin` (if it sent one), as llama-server
    /// sends them: the allowed origin where there is one, then credentials (`true` or
    /// `false`), methods and headers, whatever the origin.
    pub fn preflight_headers(&self, origin: Option<&str>) -> Vec<(&'static str, String)> {
        let mut h = Vec::new();
        if let Some(allowed) = origin.and_then(|o| self.allow_origin(o)) {
            if allowed != "*" {
                h.push(("Vary", "Origin".to_string()));
            }
            h.push(("Access-Control-Allow-Origin", allowed));
        }
        h.push((
            "Access-Control-Allow-Credentials",
            self.credentials.to_string(),
        ));
        h.push(("Access-Control-Allow-Methods", self.methods.clone()));
        h.push(("Access-Control-Allow-Headers", self.headers.clone()));
        h
    }
}

/// Whether `origin` (`http://localhost:3000`) names this machine, read as llama.cpp reads a
/// URL: an `http` or `https` scheme, an optional `user@`, then the host `localhost`,
/// `127.0.0.1` or `[::1]`, and an optional port that must be a number. (llama.cpp looks for
/// the `@` past the authority too; a browser never sends an origin with a path, and here the
/// `@` counts only before the first `/`.)
fn is_localhost(origin: &str) -> bool {
    let Some(rest) = origin
        .strip_prefix("http://")
        .or_else(|| origin.strip_prefix("https://"))
    else {
        return false;
    };
    let authority = rest.split('/').next().unwrap_or("");
    let authority = authority.rsplit_once('@').map_or(authority, |(_, a)| a);
    let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
        let Some((host, after)) = v6.split_once(']') else {
            return false;
        };
        (host, after.strip_prefix(':').unwrap_or(""))
    } else {
        authority.split_once(':').unwrap_or((authority, ""))
    };
    port_ok(port)
        && matches!(
            host.to_ascii_lowercase().as_str(),
            "localhost" | "127.0.0.1" | "::1"
        )
}

/// Whether llama.cpp's `std::stoi` takes `port`: empty, or optional spaces and sign, then
/// digits whose value fits an `int` (anything may follow them).
fn port_ok(port: &str) -> bool {
    if port.is_empty() {
        return true;
    }
    let p = port.trim_start_matches([' ', '\t', '\n', '\x0b', '\x0c', '\r']);
    let p = p.strip_prefix(['+', '-']).unwrap_or(p);
    let digits: String = p.chars().take_while(char::is_ascii_digit).collect();
    !digits.is_empty() && digits.parse::<i32>().is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    const LOCAL: &[&str] = &[
        "http://localhost",
        "http://localhost:8080",
        "http://127.0.0.1",
        "http://127.0.0.1:3000",
        "http://[::1]",
        "http://[::1]:3000",
        "https://user@localhost:1",
    ];
    const FOREIGN: &[&str] = &[
        "http://web.mydomain.fr",
        "http://evil.com",
        "http://notlocalhost",
        "http://localhost.evil.com",
        "http://localhost:abc",
        "http://[::1",
        "ftp://localhost",
        "localhost",
        "http://evil.com/@localhost",
    ];

    fn origin_of(h: &[(&'static str, String)]) -> Option<String> {
        h.iter()
            .find(|(n, _)| *n == "Access-Control-Allow-Origin")
            .map(|(_, v)| v.clone())
    }

    #[test]
    fn the_localhost_rule() {
        let local = Cors::new(Some("localhost"), "GET", "*", true);
        for o in LOCAL {
            assert!(local.allows(o), "{o}");
            assert_eq!(
                origin_of(&local.preflight_headers(Some(o))).as_deref(),
                Some(*o)
            );
        }
        for o in FOREIGN {
            assert!(!local.allows(o), "{o}");
            let h = local.preflight_headers(Some(o));
            assert_eq!(origin_of(&h), None, "{o}");
            assert!(h.contains(&("Access-Control-Allow-Credentials", "true".into())));
        }
    }

    #[test]
    fn the_default_echoes_every_origin() {
        let any = Cors::default();
        assert!(any.allows("http://evil.com"));
        let h = any.preflight_headers(Some("web.mydomain.fr"));
        assert_eq!(origin_of(&h).as_deref(), Some("web.mydomain.fr"));
        assert!(h.contains(&(
            "Access-Control-Allow-Methods",
            "GET, POST, DELETE, OPTIONS".into()
        )));
        assert!(h.contains(&("Access-Control-Allow-Headers", "*".into())));
        // Without credentials, `*` itself.
        let open = Cors::new(Some("*"), "GET", "*", false);
        let h = open.preflight_headers(Some("http://a.example"));
        assert_eq!(origin_of(&h).as_deref(), Some("*"));
        assert!(h.contains(&("Access-Control-Allow-Credentials", "false".into())));
        // No Origin, no Allow-Origin.
        assert_eq!(origin_of(&any.preflight_headers(None)), None);
    }

    #[test]
    fn origin_lists() {
        let list = Cors::new(
            Some("http://a.example, https://b.example:8443/"),
            "GET",
            "*",
            false,
        );
        assert!(list.allows("https://B.example:8443"));
        assert!(!list.allows("http://c.example"));
        let h = list.preflight_headers(Some("http://a.example"));
        assert_eq!(origin_of(&h).as_deref(), Some("http://a.example"));
        let h = list.preflight_headers(Some("http://c.example"));
        assert_eq!(
            origin_of(&h).as_deref(),
            Some("http://a.example, https://b.example:8443/")
        );
        assert!(!list
            .answer_headers("http://a.example")
            .iter()
            .any(|(n, _)| *n == "Access-Control-Allow-Credentials"));
    }

    #[test]
    fn ports_as_stoi_reads_them() {
        assert!(port_ok("") && port_ok("8080") && port_ok(" +80x"));
        assert!(!port_ok("abc") && !port_ok("99999999999") && !port_ok("-"));
    }
}
