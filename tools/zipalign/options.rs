//! zipalign's command line: parsed raw (getopt style: `-j0`, `-a4096`, `-a 4096`, `--`), then
//! validated into [`Options`]. One parser; the usage text lives here beside it.

use std::ffi::OsString;
use std::path::PathBuf;

pub const USAGE: &str = "\
usage: zipalign [-a ALIGN] [-j] [-0] [-N] [-v] [-h] ZIP FILE...

Adds each FILE to the PKZIP archive ZIP, stored uncompressed, with the start of its data
aligned to ALIGN bytes of the file, so that a program can mmap it in place. ZIP may be an
executable: its bytes are kept, and it stays runnable. ZIP is created if missing. An entry
that already has a FILE's name is replaced. ZIP64 records are always written.

  -a ALIGN  alignment of each entry's data: a power of two, default 65536
  -j        junk paths: name each entry by the FILE's base name only
  -0        store uncompressed (the default and only mode)
  -N        nondeterministic: stamp entries with each FILE's mtime (UTC)
            instead of a fixed time, which makes the output reproducible
  -v        verbose: say what is added, kept and replaced
  -h        show this help
";

pub use llamafile::bundle::pack::DEFAULT_ALIGNMENT;
/// Larger alignments only waste space; 1 GiB is far beyond any page or GPU requirement.
const MAX_ALIGNMENT: u64 = 1 << 30;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Options {
    pub alignment: u64,
    pub junk_paths: bool,
    pub use_mtime: bool,
    pub verbose: bool,
    pub zip: PathBuf,
    pub files: Vec<PathBuf>,
}

#[derive(Debug, PartialEq, Eq)]
pub enum Command {
    Help,
    Pack(Options),
}

/// A command-line mistake, said in one line.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(String);

/// Parses the arguments after the program name.
pub fn parse(args: impl IntoIterator<Item = OsString>) -> Result<Command, UsageError> {
    let mut alignment = DEFAULT_ALIGNMENT;
    let mut opts = Options {
        alignment,
        junk_paths: false,
        use_mtime: false,
        verbose: false,
        zip: PathBuf::new(),
        files: Vec::new(),
    };
    let mut args = args.into_iter();
    let mut operands = Vec::new();
    while let Some(arg) = args.next() {
        let Some(text) = arg.to_str() else {
            operands.push(PathBuf::from(arg));
            break;
        };
        if text == "--help" {
            return Ok(Command::Help);
        }
        if text == "--" {
            break;
        }
        let Some(flags) = text.strip_prefix('-').filter(|f| !f.is_empty()) else {
            operands.push(PathBuf::from(arg));
            break;
        };
        for (i, flag) in flags.char_indices() {
            match flag {
                'h' => return Ok(Command::Help),
                'j' => opts.junk_paths = true,
                'N' => opts.use_mtime = true,
                'v' => opts.verbose = true,
                '0' => {}
                '1'..='9' => {
                    return Err(UsageError(format!(
                        "-{flag}: compression is not supported; entries are stored (-0) so they can be mapped"
                    )))
                }
                'a' => {
                    let rest = &flags[i + 1..];
                    let value = if rest.is_empty() {
                        let next = args.next().ok_or_else(|| {
                            UsageError("-a needs a value (a power of two)".into())
                        })?;
                        next.to_string_lossy().into_owned()
                    } else {
                        rest.to_string()
                    };
                    alignment = parse_alignment(&value)?;
                    break;
                }
                other => {
                    return Err(UsageError(format!(
                        "unknown flag -{other} (try zipalign -h)"
                    )))
                }
            }
        }
    }
    operands.extend(args.map(PathBuf::from));
    let mut operands = operands.into_iter();
    opts.alignment = alignment;
    opts.zip = operands
        .next()
        .ok_or_else(|| UsageError("missing ZIP argument (try zipalign -h)".into()))?;
    opts.files = operands.collect();
    if opts.files.is_empty() {
        return Err(UsageError("no FILE to add (try zipalign -h)".into()));
    }
    Ok(Command::Pack(opts))
}

fn parse_alignment(value: &str) -> Result<u64, UsageError> {
    let bad = || {
        UsageError(format!(
            "-a {value}: alignment must be a power of two from 1 to {MAX_ALIGNMENT}"
        ))
    };
    let alignment: u64 = value.parse().map_err(|_| bad())?;
    if !alignment.is_power_of_two() || alignment > MAX_ALIGNMENT {
        return Err(bad());
    }
    Ok(alignment)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_strs(args: &[&str]) -> Result<Command, UsageError> {
        parse(args.iter().map(OsString::from))
    }

    fn pack(args: &[&str]) -> Options {
        match parse_strs(args) {
            Ok(Command::Pack(opts)) => opts,
            other => panic!("{args:?}: {other:?}"),
        }
    }

    #[test]
    fn defaults_and_operands() {
        let opts = pack(&["out", "a", "b"]);
        assert_eq!(opts.alignment, DEFAULT_ALIGNMENT);
        assert!(!opts.junk_paths && !opts.use_mtime && !opts.verbose);
        assert_eq!(opts.zip, PathBuf::from("out"));
        assert_eq!(opts.files, [PathBuf::from("a"), PathBuf::from("b")]);
    }

    #[test]
    fn combined_flags_and_alignment_forms() {
        let opts = pack(&["-j0vN", "-a4096", "out", "a"]);
        assert!(opts.junk_paths && opts.use_mtime && opts.verbose);
        assert_eq!(opts.alignment, 4096);
        assert_eq!(pack(&["-ja", "32", "out", "a"]).alignment, 32);
        assert_eq!(pack(&["--", "-out", "a"]).zip, PathBuf::from("-out"));
    }

    #[test]
    fn help() {
        assert_eq!(parse_strs(&["-h"]).unwrap(), Command::Help);
        assert_eq!(parse_strs(&["-j", "--help"]).unwrap(), Command::Help);
    }

    #[test]
    fn errors_say_what_is_wrong() {
        let err = |args: &[&str]| parse_strs(args).unwrap_err().to_string();
        assert!(err(&["-a", "100", "z", "f"]).contains("power of two"));
        assert!(err(&["-a", "0", "z", "f"]).contains("power of two"));
        assert!(err(&["-a", "x", "z", "f"]).contains("power of two"));
        assert!(err(&["-a"]).contains("needs a value"));
        assert!(err(&["-6", "z", "f"]).contains("not supported"));
        assert!(err(&["-q", "z", "f"]).contains("unknown flag -q"));
        assert!(err(&[]).contains("missing ZIP"));
        assert!(err(&["z"]).contains("no FILE"));
    }
}
