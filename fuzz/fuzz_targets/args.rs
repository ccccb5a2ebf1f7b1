//! `.args` parsing of arbitrary text (quotes, comments, the `...` placeholder), then merging with
//! user arguments: the user's arguments all appear, once each, in order.

#![no_main]

use std::ffi::OsString;

use libfuzzer_sys::fuzz_target;
use llamafile::args::{merge, parse_args_file};

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let Ok(defaults) = parse_args_file(&text) else {
        return;
    };
    let n_defaults = defaults.args.len();
    let user: Vec<OsString> = vec!["-n".into(), "5".into(), "...".into()];
    let merged = merge(defaults, user.clone());
    assert_eq!(merged.len(), n_defaults + user.len());
});
