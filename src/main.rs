//! The `llamafile` executable: parse the command line, run the chosen mode, and turn any error
//! into one line on stderr with a non-zero exit status.

use llamafile::bundle::Bundle;
use llamafile::chat::isolate;
use llamafile::cli::{self, CliError};
use std::process::ExitCode;

fn main() -> ExitCode {
    // A child started to run one chat template (llamafile::chat::isolate) does only that.
    if let Some(status) = isolate::serve_if_worker() {
        return status;
    }
    match isolate::own_executable() {
        Ok(exe) => isolate::enable(exe),
        Err(e) => eprintln!(
            "llamafile: warning: cannot find this executable ({e}); chat templates run in-process, bounded by their instruction budget only"
        ),
    }
    let own = match Bundle::open_self() {
        Ok(b) => b,
        Err(e) => return fail(&e),
    };
    // `.args` from our own ZIP is applied before anything else reads argv.
    let argv = match llamafile::args::expand(std::env::args_os().collect(), own.as_ref()) {
        Ok(a) => a,
        Err(e) => return fail(&e),
    };
    let parsed = match cli::parse(argv) {
        Ok(c) => c,
        Err(CliError::Info(text)) => {
            print!("{text}");
            return ExitCode::SUCCESS;
        }
        Err(CliError::Usage(msg)) => {
            eprintln!("llamafile: error: {msg}");
            return ExitCode::from(2);
        }
    };
    match llamafile::app::run(&parsed, own.as_ref()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(&e),
    }
}

fn fail(e: &dyn std::fmt::Display) -> ExitCode {
    eprintln!("llamafile: error: {e:#}");
    ExitCode::FAILURE
}
