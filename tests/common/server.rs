//! The real `llamafile` binary started as a server on a free loopback port, for the tests that
//! drive it over HTTP.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};

/// A running server; killed when dropped.
pub struct Server {
    pub child: Child,
    pub port: u16,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// [`start_with`] on test model `stem`, or `None` when it is absent (see `common::model_path`).
pub fn start_model(stem: &str, args: &[&str]) -> Option<Server> {
    Some(start_with(&super::model_path(stem)?, args))
}

/// Starts the server on `model` with `args`, on any free port unless `args` names `--port`; never
/// opens a browser. Returns once the server has printed its URL.
pub fn start_with(model: &Path, args: &[&str]) -> Server {
    start_with_env(model, args, &[])
}

/// [`start_with`] with environment variables `env` set.
pub fn start_with_env(model: &Path, args: &[&str], env: &[(&str, &str)]) -> Server {
    start_exe(Path::new(env!("CARGO_BIN_EXE_llamafile")), model, args, env)
}

/// [`start_with_env`] from executable `exe` (a copy of the binary, say).
pub fn start_exe(exe: &Path, model: &Path, args: &[&str], env: &[(&str, &str)]) -> Server {
    let mut cmd = Command::new(exe);
    cmd.envs(env.iter().copied());
    cmd.arg("-m").arg(model).args(["--nobrowser", "-t", "2"]);
    if !args.contains(&"--port") {
        cmd.args(["--port", "0"]);
    }
    cmd.args(args)
        .env_remove("DISPLAY")
        .env_remove("WAYLAND_DISPLAY")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    // A copy just written may be "text file busy" for a moment: a child another test forked
    // while the copy was open for writing holds it open until it execs.
    let mut tries = 0;
    let mut child = loop {
        match cmd.spawn() {
            Err(e) if e.kind() == std::io::ErrorKind::ExecutableFileBusy && tries < 50 => {
                tries += 1;
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            other => break other.expect("start the server"),
        }
    };
    let stdout = child.stdout.take().unwrap();
    let mut lines = BufReader::new(stdout).lines();
    let line = lines
        .next()
        .expect("the server prints its URL")
        .expect("read stdout");
    let port = line
        .split("http://127.0.0.1:")
        .nth(1)
        .and_then(|rest| rest.split('/').next())
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no URL in {line:?}"));
    // Keep draining stdout so the server never blocks on a full pipe.
    std::thread::spawn(move || for _ in lines {});
    Server { child, port }
}
