//! Every `LLAMA_ARG_*` variable of `llama-server --help` parses exactly as its flag does. One
//! test in its own binary: it sets the process environment, which the parser reads, so no
//! other test may run beside it.

mod common;

use common::help::{llama_server_flags, plausible_value};
use llamafile::cli::parse;
use std::ffi::OsString;

/// The parse outcome as text, with the variable's name taken out of messages.
fn outcome(args: &[&str]) -> String {
    let argv: Vec<OsString> = std::iter::once("llamafile")
        .chain(args.iter().copied())
        .map(OsString::from)
        .collect();
    let text = match parse(argv) {
        Ok(cli) => format!("{cli:?}"),
        Err(e) => format!("error: {e}"),
    };
    match text.find(" (from ") {
        Some(at) => {
            let end = text[at..].find(')').map_or(text.len(), |e| at + e + 1);
            format!("{}{}", &text[..at], &text[end..])
        }
        None => text,
    }
}

/// The fields of two `Debug` renderings that differ (or the whole texts, if short).
fn diff(a: &str, b: &str) -> String {
    if a == b {
        return "nothing".to_string();
    }
    let (fa, fb): (Vec<&str>, Vec<&str>) = (a.split(", ").collect(), b.split(", ").collect());
    if fa.len() != fb.len() || fa.len() < 4 {
        return format!("[{a}] vs [{b}]");
    }
    fa.iter()
        .zip(&fb)
        .filter(|(x, y)| x != y)
        .map(|(x, y)| format!("{x} -> {y}"))
        .collect::<Vec<_>>()
        .join("; ")
}

#[test]
fn each_variable_parses_as_its_flag() {
    let (mut checked, mut acting) = (0, 0);
    let mut bad = Vec::new();
    let default = outcome(&[]);
    for f in llama_server_flags() {
        let Some(env) = f.env.clone() else { continue };
        let long = f.long().to_string();
        // (value for the variable, arguments it must equal)
        let mut cases: Vec<(String, Vec<String>)> = Vec::new();
        if f.takes_value() || f.placeholder.is_some() {
            let v = plausible_value(&f).unwrap_or_else(|| "1".to_string());
            cases.push((v.clone(), vec![long.clone(), v]));
        } else {
            cases.push(("1".to_string(), vec![long.clone()]));
            // A pair's variable switches it off as its negative form does.
            if let Some(neg) = f.names.iter().find(|n| n.starts_with("--no-")) {
                cases.push(("0".to_string(), vec![neg.clone()]));
            }
        }
        for (value, args) in cases {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let by_flag = outcome(&args);
            std::env::set_var(&env, &value);
            let by_env = outcome(&[]);
            // The command line wins over the variable (for a switch, one saying the opposite).
            let other = match value.as_str() {
                "1" => "0",
                "0" => "1",
                _ => "not a value",
            };
            std::env::set_var(&env, other);
            let both = outcome(&args);
            std::env::remove_var(&env);
            if by_flag != by_env || both != by_flag {
                bad.push(format!(
                    "{env}={value} vs {args:?}: env differs in {}; both differs in {}",
                    diff(&by_flag, &by_env),
                    diff(&by_flag, &both)
                ));
            }
            checked += 1;
            // A documented no-op flag leaves the outcome as it was, and so does its variable,
            // trivially; the comparison above bites on the flags that change something.
            acting += usize::from(by_flag != default);
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
    assert!(checked > 150, "only {checked} variables checked");
    // 59 of 173 today; the rest are documented no-ops or refused features.
    assert!(
        acting >= 50,
        "only {acting} of {checked} variables change the parse: the comparison tests little"
    );
}
