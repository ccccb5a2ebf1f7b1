//! Running a chat template in a child process that can be stopped: a GGUF's template is
//! untrusted code, and minijinja's instruction budget does not bound the work inside one
//! instruction (iterating `[] * 555555555555` spins without end; a few concatenations of a
//! large string fill memory). The child is this same executable, started with
//! [`WORKER_ENV`] set; it reads one [`Job`] as JSON on stdin, answers one [`Outcome`] on
//! stdout and exits. The parent kills it past [`DEADLINE`]; on Linux it also runs under
//! `RLIMIT_AS` ([`MEMORY_LIMIT`]) and `RLIMIT_CPU`, so it can neither fill memory nor outlive
//! a parent that died.
//!
//! Isolation is on once [`enable`] names the executable (the `llamafile` binary does so at
//! start); a library user that never calls it renders in-process, with the budget only.

use super::message::Message;
use super::template::{ChatError, ChatTemplate, RenderOptions, TemplateSpec};
use serde::{Deserialize, Serialize};
use std::borrow::Cow;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::{Arc, Condvar, Mutex, OnceLock, PoisonError};
use std::time::Duration;

/// Set (to `1`) in a template worker's environment.
pub const WORKER_ENV: &str = "LLAMAFILE_TEMPLATE_WORKER";

/// How long one compile or rendering may take, in wall-clock time. A real template renders in
/// milliseconds; this leaves room for a machine whose cores are all busy generating.
pub const DEADLINE: Duration = Duration::from_secs(10);

/// The worker's address-space limit on Linux: far beyond any real conversation's prompt.
pub const MEMORY_LIMIT: u64 = 1 << 30;

/// The longest rendered prompt accepted back from a worker.
const MAX_OUTPUT: u64 = 256 << 20;

static WORKER_EXE: OnceLock<PathBuf> = OnceLock::new();

/// Renders chat templates in child processes of `exe` from now on (which must call
/// [`serve_if_worker`] first thing in `main`). Later calls change nothing.
pub fn enable(exe: PathBuf) {
    let _ = WORKER_EXE.set(exe);
}

/// The path that starts this executable again: `/proc/self/exe` on Linux, which still runs it
/// after the file was replaced or deleted (an upgrade under a running server), else the path
/// the platform reports.
pub fn own_executable() -> std::io::Result<PathBuf> {
    let proc_self = Path::new("/proc/self/exe");
    if cfg!(target_os = "linux") && proc_self.exists() {
        return Ok(proc_self.to_path_buf());
    }
    std::env::current_exe()
}

/// The executable that workers run, once [`enable`] named one.
pub(super) fn worker_exe() -> Option<&'static Path> {
    WORKER_EXE.get().map(PathBuf::as_path)
}

/// One piece of work for a worker: compile `spec`, then render `render` if given. Borrowed
/// where it is sent, owned where it is read.
#[derive(Serialize, Deserialize)]
pub(super) struct Job<'a> {
    pub spec: Cow<'a, TemplateSpec>,
    pub render: Option<RenderArgs<'a>>,
    /// Probe what the template can take instead, answered as JSON ([`ChatTemplate::caps`]).
    #[serde(default)]
    pub caps: bool,
}

/// The arguments of [`ChatTemplate::render_with`].
#[derive(Serialize, Deserialize)]
pub(super) struct RenderArgs<'a> {
    pub messages: Cow<'a, [Message]>,
    pub options: Cow<'a, RenderOptions>,
}

/// A worker's answer.
#[derive(Serialize, Deserialize)]
enum Outcome {
    /// Compiled (and rendered to this text, when asked to).
    Done(Option<String>),
    Syntax(String),
    Render(String),
}

/// When this process was started as a template worker: does the one job on stdin and returns
/// the exit status `main` should end with. Otherwise returns `None` at once.
pub fn serve_if_worker() -> Option<std::process::ExitCode> {
    std::env::var_os(WORKER_ENV)?;
    let mut input = Vec::new();
    let job = match std::io::stdin().read_to_end(&mut input) {
        Ok(_) => serde_json::from_slice::<Job>(&input).map_err(|e| e.to_string()),
        Err(e) => Err(e.to_string()),
    };
    let job = match job {
        Ok(job) => job,
        Err(e) => {
            // (a parent discards this; a person who set the variable by hand reads it)
            eprintln!(
                "llamafile: error: {WORKER_ENV} is set, and stdin is not a template job: {e}"
            );
            return Some(std::process::ExitCode::FAILURE);
        }
    };
    drop(input);
    let outcome = match do_job(job) {
        Ok(text) => Outcome::Done(text),
        Err(ChatError::Syntax(m)) => Outcome::Syntax(m),
        Err(ChatError::Render(m)) => Outcome::Render(m),
        // (in-process templates fail in the two ways above only)
        Err(e) => Outcome::Render(e.to_string()),
    };
    let mut out = std::io::stdout().lock();
    let written = serde_json::to_writer(&mut out, &outcome).is_ok() && out.flush().is_ok();
    Some(if written {
        std::process::ExitCode::SUCCESS
    } else {
        std::process::ExitCode::FAILURE
    })
}

fn do_job(job: Job) -> Result<Option<String>, ChatError> {
    let t = ChatTemplate::compile(job.spec.into_owned())?;
    if job.caps {
        return Ok(serde_json::to_string(&t.caps()).ok());
    }
    match job.render {
        Some(r) => t.render_with(&r.messages, &r.options).map(Some),
        None => Ok(None),
    }
}

/// Runs `job` in a worker started from `exe`, stopped after `deadline`.
pub(super) fn run(exe: &Path, job: &Job, deadline: Duration) -> Result<Option<String>, ChatError> {
    let input = serde_json::to_vec(job).map_err(|e| ChatError::Worker(e.to_string()))?;
    let mut child = Command::new(exe)
        .env(WORKER_ENV, "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| ChatError::Worker(format!("cannot start {}: {e}", exe.display())))?;
    // The worker reads all of its input before it does anything, so the limits are in place
    // before the template runs.
    limit_resources(child.id(), deadline);
    // Read on a thread of its own, joined before returning (no thread outlives a rendering);
    // the answer is handed over under a lock and a condition variable, waited on up to the
    // deadline.
    let mut stdout = child.stdout.take().expect("stdout is piped");
    let answer_slot = Arc::new((Mutex::new(None), Condvar::new()));
    let reader = {
        let slot = Arc::clone(&answer_slot);
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            let read = (&mut stdout).take(MAX_OUTPUT + 1).read_to_end(&mut buf);
            *slot.0.lock().unwrap_or_else(PoisonError::into_inner) = Some(read.map(|_| buf));
            slot.1.notify_one();
        })
    };
    let mut stdin = child.stdin.take().expect("stdin is piped");
    // A worker that died early closes its end: the outcome below says why.
    let _ = stdin.write_all(&input);
    drop(stdin);
    let answer = {
        let (lock, ready) = &*answer_slot;
        let guard = lock.lock().unwrap_or_else(PoisonError::into_inner);
        let (mut guard, _) = ready
            .wait_timeout_while(guard, deadline, |a| a.is_none())
            .unwrap_or_else(PoisonError::into_inner);
        guard.take()
    };
    let Some(answer) = answer else {
        let _ = child.kill();
        let _ = child.wait();
        let _ = reader.join();
        return Err(ChatError::Stopped(format!(
            "it ran longer than {} s",
            deadline.as_secs_f64()
        )));
    };
    let too_long = matches!(&answer, Ok(buf) if buf.len() as u64 > MAX_OUTPUT);
    if too_long {
        // (it may be blocked writing the rest)
        let _ = child.kill();
    }
    let status = child
        .wait()
        .map_err(|e| ChatError::Worker(format!("cannot wait for the worker: {e}")));
    let _ = reader.join();
    let status = status?;
    if too_long {
        return Err(ChatError::Stopped(format!(
            "its output is longer than {} MiB",
            MAX_OUTPUT >> 20
        )));
    }
    let output = answer.unwrap_or_default();
    match serde_json::from_slice::<Outcome>(&output) {
        Ok(Outcome::Done(text)) if status.success() => Ok(text),
        Ok(Outcome::Syntax(m)) => Err(ChatError::Syntax(m)),
        Ok(Outcome::Render(m)) => Err(ChatError::Render(m)),
        _ => Err(ChatError::Stopped(died(status))),
    }
}

/// Why a worker ended without an answer.
fn died(status: ExitStatus) -> String {
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        if let Some(sig) = status.signal() {
            return format!(
                "it was killed by signal {sig} (past its {} MiB memory or CPU-time limit)",
                MEMORY_LIMIT >> 20
            );
        }
    }
    format!("it ended without an answer ({status})")
}

/// Caps the worker's memory and CPU time, where the platform allows it.
#[cfg(target_os = "linux")]
fn limit_resources(pid: u32, deadline: Duration) {
    let cap = |resource, limit: u64| {
        let lim = libc::rlimit {
            rlim_cur: limit,
            rlim_max: limit,
        };
        // SAFETY: prlimit reads `lim` and writes nothing (old limit pointer is null); `pid` is
        // our own child, which has not been waited for, so the id cannot have been reused.
        unsafe { libc::prlimit(pid as libc::pid_t, resource, &lim, std::ptr::null_mut()) };
    };
    cap(libc::RLIMIT_AS, MEMORY_LIMIT);
    // Killed by SIGXCPU or aborting on a failed allocation: no core file.
    cap(libc::RLIMIT_CORE, 0);
    // Whole seconds, one more than the deadline: the kill comes first while the parent lives.
    cap(libc::RLIMIT_CPU, deadline.as_secs() + 1);
}

#[cfg(not(target_os = "linux"))]
fn limit_resources(_pid: u32, _deadline: Duration) {}
