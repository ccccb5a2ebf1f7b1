//! `zipalign`: adds files to a PKZIP archive (typically the llamafile executable itself),
//! stored and aligned so the running program can mmap them in place. See `zipalign -h`.
//!
//! main parses the command line ([`options`]), runs the rewrite ([`archive`]) and turns any
//! error into one line on stderr and a non-zero exit.

mod archive;
mod options;

use std::process::ExitCode;

fn main() -> ExitCode {
    match options::parse(std::env::args_os().skip(1)) {
        Ok(options::Command::Help) => {
            print!("{}", options::USAGE);
            ExitCode::SUCCESS
        }
        Ok(options::Command::Pack(opts)) => match archive::run(&opts) {
            Ok(()) => ExitCode::SUCCESS,
            Err(err) => {
                eprintln!("zipalign: {err:#}");
                ExitCode::FAILURE
            }
        },
        Err(err) => {
            eprintln!("zipalign: {err}");
            ExitCode::from(2)
        }
    }
}
