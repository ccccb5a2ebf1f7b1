//! The dependency direction of `src/` (docs/architecture.md): every top-level module belongs to
//! a layer and imports only from its own layer or below, no two top-level modules import each
//! other even indirectly, `cli` and `args` import no other front end, and nothing imports `app`.
//! Reads the sources: a `crate::NAME` path outside comments is an import of `NAME`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// The layers, bottom first.
const LAYERS: &[(&str, &[&str])] = &[
    (
        "kernels",
        &[
            "cpu", "cores", "pool", "quant", "ops", "platform", "calendar", "escapes", "timings",
        ],
    ),
    ("model data", &["gguf", "bundle", "model", "tokenizer"]),
    ("backends", &["backend", "gpu"]),
    (
        "engine",
        &["engine", "sampling", "embedding", "stop_text", "vision"],
    ),
    (
        "front ends",
        &[
            "cli",
            "args",
            "app",
            "chat",
            "bench",
            "perplexity",
            "server",
            "upgrade",
        ],
    ),
];

fn layer_of(module: &str) -> Option<usize> {
    LAYERS.iter().position(|(_, mods)| mods.contains(&module))
}

/// The top-level module a file under `src/` belongs to (`None`: lib.rs, main.rs).
fn top_module(rel: &Path) -> Option<String> {
    let first = rel.components().next()?.as_os_str().to_str()?;
    match first.strip_suffix(".rs") {
        Some("lib") | Some("main") => None,
        Some(stem) => Some(stem.to_string()),
        None => Some(first.to_string()),
    }
}

/// The first path segments after each `crate::` in `code` (comments removed first).
fn imported(code: &str) -> BTreeSet<String> {
    let code: String = code
        .lines()
        .map(|l| l.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n");
    let mut out = BTreeSet::new();
    let mut rest = code.as_str();
    while let Some(at) = rest.find("crate::") {
        let preceded_by_ident = rest[..at]
            .chars()
            .next_back()
            .is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '$');
        rest = &rest[at + "crate::".len()..];
        if preceded_by_ident {
            continue; // e.g. `$crate::` or `other_crate::`
        }
        if let Some(group) = rest.strip_prefix('{') {
            // `crate::{a::x, b}`: the first segment of each top-level entry.
            let mut depth = 0;
            let mut entry_start = true;
            let mut word = String::new();
            for c in group.chars() {
                if c.is_alphanumeric() || c == '_' {
                    if entry_start {
                        word.push(c);
                    }
                    continue;
                }
                if !word.is_empty() {
                    out.insert(std::mem::take(&mut word));
                    entry_start = false;
                }
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => entry_start = true,
                    _ => {}
                }
            }
            if !word.is_empty() {
                out.insert(word);
            }
        } else {
            let word: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            out.insert(word);
        }
    }
    out
}

fn rust_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("src/ is readable") {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Top-level module -> (imported module -> a file that imports it).
fn import_graph() -> BTreeMap<String, BTreeMap<String, String>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut graph: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
    for f in files {
        let rel = f.strip_prefix(&src).unwrap();
        let Some(from) = top_module(rel) else {
            continue;
        };
        let code = std::fs::read_to_string(&f).unwrap();
        let edges = graph.entry(from.clone()).or_default();
        for to in imported(&code) {
            if to != from && to != "self" {
                edges.entry(to).or_insert_with(|| rel.display().to_string());
            }
        }
    }
    graph
}

#[test]
fn every_top_level_module_has_a_layer() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut missing = Vec::new();
    for entry in std::fs::read_dir(&src).unwrap() {
        let name = entry.unwrap().file_name();
        if let Some(m) = top_module(Path::new(&name)) {
            if layer_of(&m).is_none() {
                missing.push(m);
            }
        }
    }
    assert!(
        missing.is_empty(),
        "modules without a layer in tests/architecture.rs (and docs/architecture.md): {missing:?}"
    );
}

#[test]
fn imports_point_down_or_sideways() {
    let mut wrong = Vec::new();
    for (from, edges) in import_graph() {
        let Some(lf) = layer_of(&from) else { continue };
        for (to, file) in edges {
            let Some(lt) = layer_of(&to) else {
                continue; // an external crate's `crate::` inside a macro, or a missing module
            };
            if lt > lf {
                wrong.push(format!(
                    "{from} ({}) imports {to} ({}) in src/{file}",
                    LAYERS[lf].0, LAYERS[lt].0
                ));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "imports pointing up:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn no_front_end_imports_app_and_cli_imports_no_mode() {
    let front = LAYERS.len() - 1;
    let mut wrong = Vec::new();
    for (from, edges) in import_graph() {
        for (to, file) in edges {
            let cli_to_mode = (from == "cli" || from == "args")
                && layer_of(&to) == Some(front)
                && to != "cli"
                && to != "args";
            if to == "app" || cli_to_mode {
                wrong.push(format!("{from} imports {to} in src/{file}"));
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn no_import_circle_among_top_level_modules() {
    let graph = import_graph();
    // A module reaches itself through others: report the first circle found.
    for start in graph.keys() {
        let mut stack: Vec<(String, Vec<String>)> = vec![(start.clone(), vec![start.clone()])];
        let mut seen = BTreeSet::new();
        while let Some((node, path)) = stack.pop() {
            for next in graph.get(&node).into_iter().flat_map(|e| e.keys()) {
                if next == start {
                    panic!("import circle: {} -> {start}", path.join(" -> "));
                }
                if seen.insert(next.clone()) {
                    let mut p = path.clone();
                    p.push(next.clone());
                    stack.push((next.clone(), p));
                }
            }
        }
    }
}

#[test]
fn the_import_reader_sees_groups_and_skips_comments() {
    let code = "use crate::{a::X, b, c::{d, e}};\n// crate::commented\nlet x = crate::f::g();\n\
                macro_rules! m { () => { $crate::h } }";
    let got: Vec<String> = imported(code).into_iter().collect();
    assert_eq!(got, ["a", "b", "c", "f"]);
}
