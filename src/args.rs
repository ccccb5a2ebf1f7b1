//! `.args`: default arguments stored in our own ZIP, merged into argv before anything else
//! reads it, so every flag (mode flags included) works from `.args`.
//!
//! Format (see `.args.example`):
//! - whitespace separates arguments; one per line is the convention;
//! - `'...'` quotes literally (no escapes inside);
//! - `"..."` quotes with two escapes, `\"` and `\\`; any other backslash is kept as is;
//! - quoted and unquoted pieces next to each other form one argument (`--prompt="a b"`);
//! - `#` at the start of an argument starts a comment to the end of the line;
//! - the lone unquoted token `...` marks where the user's arguments go (at most once); without
//!   it they come after the defaults. A quoted `'...'` is a literal argument.
//!
//! Owns parsing and merging only; reading the entry is [`crate::bundle::Bundle::read_small`].

use std::ffi::OsString;

use crate::bundle::{Bundle, BundleError};

/// Name of the ZIP entry holding default arguments.
pub const ARGS_ENTRY: &str = ".args";

/// Why `.args` could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ArgsError {
    #[error(".args:{line}:{column}: unterminated {quote} quote")]
    UnterminatedQuote {
        line: usize,
        column: usize,
        quote: &'static str,
    },
    #[error(".args:{line}:{column}: a second `...` placeholder (only one is allowed)")]
    SecondPlaceholder { line: usize, column: usize },
    #[error(".args is not valid UTF-8: {0}")]
    NotUtf8(#[from] std::string::FromUtf8Error),
    #[error(transparent)]
    Bundle(#[from] BundleError),
}

/// The parsed `.args`: default arguments, and where the user's arguments go.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DefaultArgs {
    pub args: Vec<String>,
    /// Index in `args` at which the user's arguments are inserted (`None`: at the end).
    pub user_slot: Option<usize>,
}

/// Parses the text of an `.args` file.
pub fn parse_args_file(text: &str) -> Result<DefaultArgs, ArgsError> {
    let mut out = DefaultArgs::default();
    let mut chars = Positioned::new(text);
    loop {
        while chars.peek().is_some_and(char::is_whitespace) {
            chars.next();
        }
        let Some(first) = chars.peek() else {
            return Ok(out);
        };
        let (line, column) = chars.position();
        if first == '#' {
            while chars.next().is_some_and(|c| c != '\n') {}
            continue;
        }
        let (token, quoted) = read_token(&mut chars)?;
        if !quoted && token == "..." {
            if out.user_slot.is_some() {
                return Err(ArgsError::SecondPlaceholder { line, column });
            }
            out.user_slot = Some(out.args.len());
        } else {
            out.args.push(token);
        }
    }
}

/// Reads one argument; returns it and whether any part of it was quoted.
fn read_token(chars: &mut Positioned) -> Result<(String, bool), ArgsError> {
    let mut token = String::new();
    let mut quoted = false;
    while let Some(c) = chars.peek() {
        if c.is_whitespace() {
            break;
        }
        let (line, column) = chars.position();
        chars.next();
        let unterminated = |quote| ArgsError::UnterminatedQuote {
            line,
            column,
            quote,
        };
        match c {
            '\'' => {
                quoted = true;
                loop {
                    match chars.next() {
                        None => return Err(unterminated("single")),
                        Some('\'') => break,
                        Some(c) => token.push(c),
                    }
                }
            }
            '"' => {
                quoted = true;
                loop {
                    match chars.next() {
                        None => return Err(unterminated("double")),
                        Some('"') => break,
                        Some('\\') if matches!(chars.peek(), Some('"' | '\\')) => {
                            token.extend(chars.next());
                        }
                        Some(c) => token.push(c),
                    }
                }
            }
            c => token.push(c),
        }
    }
    Ok((token, quoted))
}

/// A char iterator that knows its 1-based line and column.
struct Positioned<'a> {
    chars: std::iter::Peekable<std::str::Chars<'a>>,
    line: usize,
    column: usize,
}

impl<'a> Positioned<'a> {
    fn new(text: &'a str) -> Self {
        Positioned {
            chars: text.chars().peekable(),
            line: 1,
            column: 1,
        }
    }

    fn peek(&mut self) -> Option<char> {
        self.chars.peek().copied()
    }

    fn position(&self) -> (usize, usize) {
        (self.line, self.column)
    }

    fn next(&mut self) -> Option<char> {
        let c = self.chars.next()?;
        if c == '\n' {
            self.line += 1;
            self.column = 1;
        } else {
            self.column += 1;
        }
        Some(c)
    }
}

/// The defaults with the user's arguments (argv without the program name) put in their slot.
pub fn merge(defaults: DefaultArgs, user: Vec<OsString>) -> Vec<OsString> {
    let slot = defaults.user_slot.unwrap_or(defaults.args.len());
    let mut args: Vec<OsString> = defaults.args.into_iter().map(OsString::from).collect();
    args.splice(slot..slot, user);
    args
}

/// argv (program name first) with `own`'s `.args` applied; unchanged when there is none.
pub fn expand(argv: Vec<OsString>, own: Option<&Bundle>) -> Result<Vec<OsString>, ArgsError> {
    let Some(bundle) = own.filter(|b| b.entry(ARGS_ENTRY).is_some()) else {
        return Ok(argv);
    };
    let text = String::from_utf8(bundle.read_small(ARGS_ENTRY)?)?;
    let defaults = parse_args_file(&text)?;
    let mut argv = argv.into_iter();
    let program = argv.next();
    Ok(program
        .into_iter()
        .chain(merge(defaults, argv.collect()))
        .collect())
}

/// [`expand`] with our own executable's ZIP, opened here.
pub fn expand_from_own_zip(
    argv: impl IntoIterator<Item = OsString>,
) -> Result<Vec<OsString>, ArgsError> {
    let own = Bundle::open_self()?;
    expand(argv.into_iter().collect(), own.as_ref())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(text: &str) -> DefaultArgs {
        parse_args_file(text).unwrap_or_else(|e| panic!("{text:?}: {e}"))
    }

    fn merged(text: &str, user: &[&str]) -> Vec<String> {
        let user = user.iter().map(OsString::from).collect();
        merge(parsed(text), user)
            .into_iter()
            .map(|s| s.into_string().unwrap())
            .collect()
    }

    #[test]
    fn placeholder_in_the_middle() {
        let text = "-m\nmodel.gguf\n...\n--temp\n0\n";
        assert_eq!(
            merged(text, &["-p", "hi"]),
            ["-m", "model.gguf", "-p", "hi", "--temp", "0"]
        );
    }

    #[test]
    fn placeholder_at_the_end() {
        assert_eq!(
            merged("-m a.gguf\n...\n", &["-n", "3"]),
            ["-m", "a.gguf", "-n", "3"]
        );
    }

    #[test]
    fn placeholder_absent_puts_user_args_last() {
        let text = "-m a.gguf";
        assert_eq!(parsed(text).user_slot, None);
        assert_eq!(merged(text, &["-n", "3"]), ["-m", "a.gguf", "-n", "3"]);
    }

    #[test]
    fn placeholder_first_puts_user_args_first() {
        assert_eq!(merged("...\n--server", &["-v"]), ["-v", "--server"]);
    }

    #[test]
    fn quotes_keep_spaces_and_join_adjacent_pieces() {
        let text = r#"-p 'The capital of France is' --prompt="a b" 'x'"y"z '' "#;
        assert_eq!(
            parsed(text).args,
            ["-p", "The capital of France is", "--prompt=a b", "xyz", ""]
        );
    }

    #[test]
    fn double_quote_escapes_only_quote_and_backslash() {
        let text = r#""say \"hi\" \\ C:\dir\n""#;
        assert_eq!(parsed(text).args, [r#"say "hi" \ C:\dir\n"#]);
        assert_eq!(parsed(r"'no \' escapes").args, [r"no \", "escapes"]);
    }

    #[test]
    fn comments_run_to_end_of_line_only_at_token_start() {
        let text = "# header\n-m a.gguf # the model\n--grammar a#b\n  # indented\n...";
        let args = parsed(text);
        assert_eq!(args.args, ["-m", "a.gguf", "--grammar", "a#b"]);
        assert_eq!(args.user_slot, Some(4));
        assert_eq!(parsed("'#not a comment'").args, ["#not a comment"]);
    }

    #[test]
    fn quoted_dots_are_a_literal_argument() {
        let args = parsed("-r '...' \"...\"");
        assert_eq!(args.args, ["-r", "...", "..."]);
        assert_eq!(args.user_slot, None);
    }

    #[test]
    fn unterminated_quote_names_line_and_column() {
        let err = parse_args_file("-m a.gguf\n-p 'oops\nmore").unwrap_err();
        assert_eq!(err.to_string(), ".args:2:4: unterminated single quote");
        let err = parse_args_file("\"x").unwrap_err();
        assert_eq!(err.to_string(), ".args:1:1: unterminated double quote");
        // A backslash-escaped quote does not close a double-quoted string.
        assert!(parse_args_file(r#""a\""#).is_err());
    }

    #[test]
    fn second_placeholder_is_an_error() {
        let err = parse_args_file("...\n-v\n  ...").unwrap_err();
        assert_eq!(
            err.to_string(),
            ".args:3:3: a second `...` placeholder (only one is allowed)"
        );
    }

    #[test]
    fn empty_and_comment_only_files_add_nothing() {
        assert_eq!(merged("", &["-h"]), ["-h"]);
        assert_eq!(merged("# nothing\n\n", &["-h"]), ["-h"]);
    }

    #[test]
    fn mode_flags_from_args_reach_argv() {
        // llamafile bug #783: mode flags in .args were ignored. Here they are plain argv.
        assert_eq!(
            merged("--server\n--port 8081\n...", &["--host", "0.0.0.0"]),
            ["--server", "--port", "8081", "--host", "0.0.0.0"]
        );
    }

    #[test]
    fn the_documented_example_means_what_it_says() {
        let example = include_str!("../.args.example");
        assert_eq!(
            merged(example, &["-n", "16", "--verbose"]),
            [
                "-m",
                "model.gguf",
                "--temp",
                "0",
                "-p",
                "The capital of France is",
                "-n",
                "16",
                "--verbose",
                "-c",
                "4096"
            ]
        );
    }

    #[test]
    fn expand_without_bundle_keeps_argv() {
        let argv: Vec<OsString> = ["prog", "-m", "x"].map(OsString::from).into();
        assert_eq!(expand(argv.clone(), None).unwrap(), argv);
    }
}
