//! `--rpc`: blocks offloaded to llama.cpp's RPC workers (`ggml-rpc-server`), started on loopback
//! by each test and stopped when it ends. The protocol client against a real worker; SmolLM2
//! and Qwen2.5-Coder-0.5B split across the local CPU and two workers give the same greedy text
//! as a local run and teacher-forced logits within llama.cpp's own noise; a worker killed
//! mid-generation, an unreachable one and a bad endpoint each end the run with one line naming
//! the problem; the server with `--rpc` serves eight slots and a context shift, and answers 503
//! naming a worker that died. The worker binary is `$LLAMAFILE_RPC_SERVER` or the one
//! `tools/build-rpc-server.sh` builds; without it the tests say so and pass, except under
//! `CI=true`, where they fail.

mod common;

use common::{http, llamafile, model_path, server, MODELS};
use llamafile::backend::rpc::{self, Conn, Worker};
use llamafile::backend::{GpuLayers, Placement};
use llamafile::engine::load_model;
use llamafile::engine::session::Session;
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The worker binary, or `None` (after saying why) when absent outside CI.
fn worker_binary() -> Option<PathBuf> {
    let p = match std::env::var_os("LLAMAFILE_RPC_SERVER") {
        Some(p) => PathBuf::from(p),
        None => {
            let home = std::env::var("HOME").unwrap_or_else(|_| "/root".into());
            PathBuf::from(home).join(".cache/llama-cpp-ref/bin/ggml-rpc-server")
        }
    };
    if p.exists() {
        return Some(p);
    }
    if std::env::var("CI").as_deref() == Ok("true") {
        panic!("{} is missing: run tools/build-rpc-server.sh", p.display());
    }
    eprintln!(
        "skipping: {} not found (tools/build-rpc-server.sh builds it)",
        p.display()
    );
    None
}

/// A worker process on a loopback port, killed when dropped.
struct RpcWorker {
    child: Child,
    endpoint: String,
}

impl RpcWorker {
    fn start(bin: &Path) -> RpcWorker {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = Command::new(bin)
            .args(["-H", "127.0.0.1", "-p", &port.to_string(), "-t", "1"])
            .env("LD_LIBRARY_PATH", bin.parent().unwrap())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start ggml-rpc-server");
        let endpoint = format!("127.0.0.1:{port}");
        let deadline = Instant::now() + Duration::from_secs(20);
        while TcpStream::connect(&endpoint).is_err() {
            assert!(
                Instant::now() < deadline,
                "worker on {endpoint} did not start"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        RpcWorker { child, endpoint }
    }
}

impl Drop for RpcWorker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn two_workers() -> Option<(RpcWorker, RpcWorker)> {
    let bin = worker_binary()?;
    Some((RpcWorker::start(&bin), RpcWorker::start(&bin)))
}

#[test]
fn protocol_round_trip_against_a_real_worker() {
    let Some(bin) = worker_binary() else { return };
    let w = RpcWorker::start(&bin);
    let mut c = Conn::connect(&w.endpoint, Duration::from_secs(10)).unwrap();
    assert_eq!(c.device_count().unwrap(), 1);
    let (free, total) = c.device_memory(0).unwrap();
    assert!(free > 0 && total >= free, "{free} {total}");
    let align = c.alignment(0).unwrap();
    assert!(align.is_power_of_two());
    let (buf, size) = c.alloc_buffer(0, 4096).unwrap();
    assert!(size >= 4096);
    let base = c.buffer_base(buf).unwrap();
    let t = rpc::wire_tensor_f32(buf, base, 1024);
    let data: Vec<u8> = (0..4096u32).map(|i| (i * 7 % 251) as u8).collect();
    c.set_tensor(&t, 0, &data, false).unwrap();
    let mut back = vec![0u8; 4096];
    c.get_tensor(&t, 0, &mut back).unwrap();
    assert_eq!(back, data);
    c.buffer_clear(buf, 0).unwrap();
    c.get_tensor(&t, 0, &mut back).unwrap();
    assert!(back.iter().all(|&b| b == 0));
    c.free_buffer(buf).unwrap();
    // A worker asked for more memory than it has says so, naming itself.
    let err = c.alloc_buffer(0, u64::MAX / 2).unwrap_err().to_string();
    assert!(
        err.contains(&w.endpoint) && err.contains("out of memory"),
        "{err}"
    );
    assert!(c.sent > 4096 && c.received > 8192);
}

#[test]
fn an_unreachable_worker_and_a_bad_endpoint_are_one_line_each() {
    // A free port on 127.0.0.2: the workers of the tests running beside this one listen on
    // 127.0.0.1 and pick their ports the same way, so one of them once took this port between
    // the pick and the connect (a worker answered, then reset) on 127.0.0.1.
    let host = "127.0.0.2";
    let port = TcpListener::bind(format!("{host}:0"))
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let err = Conn::connect(&format!("{host}:{port}"), Duration::from_secs(2))
        .err()
        .unwrap()
        .to_string();
    assert!(
        err.contains("cannot connect") && err.contains(&port.to_string()),
        "{err}"
    );
    let Some(p) = model_path(MODELS[0].0) else {
        return;
    };
    let m = p.to_str().unwrap();
    let out = llamafile(&[
        "-m",
        m,
        "-p",
        "hi",
        "-n",
        "2",
        "--rpc",
        &format!("{host}:{port}"),
    ]);
    common::assert_one_line_error(&out, "cannot connect");
    let out = llamafile(&["-m", m, "-p", "hi", "-n", "2", "--rpc", "nohost"]);
    common::assert_one_line_error(&out, "--rpc \"nohost\"");
}

/// Teacher-forced logits of `stem` on the CPU and split CPU + two workers, and the greedy text
/// of the CLI both ways.
fn split_matches_local(stem: &str, noise: f64, ngl: usize) {
    let Some(p) = model_path(stem) else { return };
    let Some((a, b)) = two_workers() else { return };
    let endpoints = vec![a.endpoint.clone(), b.endpoint.clone()];
    let path = p.to_str().unwrap();

    let mut local = load_model(path, None).unwrap();
    let n_layer = local.model.config.n_layer;
    local.model.set_placement(Placement::cpu(n_layer)).unwrap();
    let mut remote = load_model(path, None).unwrap();
    let plan = rpc::start(
        remote.model.data(),
        &endpoints,
        None,
        GpuLayers::Count(ngl),
        None,
        Duration::from_secs(30),
    )
    .unwrap();
    remote.model.set_placement(plan.placement).unwrap();
    let stages = remote.model.placement().stages();
    assert_eq!(stages.len(), 3, "{}", remote.model.placement().describe());
    assert_eq!(stages[0].name(), "cpu");
    assert_eq!((stages[1].name(), stages[2].name()), ("RPC0", "RPC1"));

    // Teacher-forced against llama.cpp's own logits (tests/data/reference), as
    // tests/reference.rs judges the local engine: argmax agreement and the mean top-5 logit
    // difference within twice llama.cpp's batched-vs-sequential noise. The local run is held
    // to the same measure beside it.
    let r = common::reference(stem);
    let g = &r["generate"][0];
    let ids = |v: &serde_json::Value| -> Vec<u32> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_u64().unwrap() as u32)
            .collect()
    };
    let prompt = ids(&g["prompt_ids"]);
    let steps = g["steps"].as_array().unwrap();
    let forced: Vec<u32> = steps
        .iter()
        .map(|s| s["id"].as_u64().unwrap() as u32)
        .collect();
    let v = local.model.config.n_vocab;
    let judge = |model: &llamafile::engine::PlacedModel| -> (f64, f64) {
        let mut s = Session::new(model, 256, 512);
        s.feed(&prompt[..prompt.len() - 1], false).unwrap();
        let mut tail = vec![*prompt.last().unwrap()];
        tail.extend_from_slice(&forced[..forced.len() - 1]);
        let logits = s.feed(&tail, true).unwrap();
        let (mut same, mut sum, mut n) = (0usize, 0f64, 0usize);
        for (i, st) in steps.iter().enumerate() {
            let row = &logits[i * v..(i + 1) * v];
            let argmax = (0..v)
                .max_by(|&a, &b| row[a].total_cmp(&row[b]).then(b.cmp(&a)))
                .unwrap();
            same += usize::from(argmax as u64 == st["id"].as_u64().unwrap());
            for t in st["top"].as_array().unwrap() {
                let (id, lg) = (t[0].as_u64().unwrap() as usize, t[1].as_f64().unwrap());
                sum += (row[id] as f64 - lg).abs();
                n += 1;
            }
        }
        (same as f64 / steps.len() as f64, sum / n as f64)
    };
    let (agree_local, mean_local) = judge(&local.model);
    let (agree, mean) = judge(&remote.model);
    eprintln!(
        "{stem}: against llama.cpp, split over two workers: argmax {:.1}%, mean |dlogit| {mean:.4}; \
         local: {:.1}%, {mean_local:.4} (limit {:.4})",
        agree * 100.0,
        agree_local * 100.0,
        2.0 * noise
    );
    assert!(
        agree >= 0.97,
        "{stem}: argmax agrees at only {:.1}%",
        agree * 100.0
    );
    assert!(
        mean <= 2.0 * noise,
        "{stem}: mean |dlogit| {mean:.4} over {}",
        2.0 * noise
    );

    // A worker serves one client at a time: this process lets go of them before the CLI runs.
    drop(remote);
    let args = |extra: &[&str]| {
        let mut a = vec![
            "-m",
            path,
            "-p",
            "Once upon a time",
            "-n",
            "24",
            "--temp",
            "0",
            "--no-display-prompt",
        ];
        a.extend_from_slice(extra);
        a.iter().map(|s| s.to_string()).collect::<Vec<_>>()
    };
    let run = |a: Vec<String>| {
        let refs: Vec<&str> = a.iter().map(String::as_str).collect();
        llamafile(&refs)
    };
    let rpc_list = endpoints.join(",");
    let ngl_s = ngl.to_string();
    let one = run(args(&[]));
    let split = run(args(&["--rpc", &rpc_list, "-ngl", &ngl_s]));
    assert!(
        split.status.success(),
        "{}",
        String::from_utf8_lossy(&split.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&one.stdout),
        String::from_utf8_lossy(&split.stdout),
        "{stem}: greedy text differs with --rpc"
    );
    let stderr = String::from_utf8_lossy(&split.stderr);
    assert!(
        stderr.contains(&format!("RPC0 ({})", a.endpoint)),
        "{stderr}"
    );
}

#[test]
fn smollm2_split_across_cpu_and_two_workers_matches_a_local_run() {
    split_matches_local(MODELS[0].0, MODELS[0].1, 20);
}

#[test]
fn qwen2_split_across_cpu_and_two_workers_matches_a_local_run() {
    split_matches_local(MODELS[2].0, MODELS[2].1, 16);
}

#[test]
fn a_worker_killed_mid_generation_is_reported_in_time() {
    let Some(p) = model_path(MODELS[0].0) else {
        return;
    };
    let Some((a, mut b)) = two_workers() else {
        return;
    };
    let rpc_list = format!("{},{}", a.endpoint, b.endpoint);
    let child = Command::new(env!("CARGO_BIN_EXE_llamafile"))
        .args([
            "-m",
            p.to_str().unwrap(),
            "-p",
            "Tell me a long story",
            "-n",
            "100000",
        ])
        .args([
            "--temp",
            "0",
            "--ignore-eos",
            "--rpc",
            &rpc_list,
            "-ngl",
            "999",
            "-to",
            "5",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_secs(3));
    b.child.kill().unwrap();
    let killed = Instant::now();
    let out = child.wait_with_output().unwrap();
    let took = killed.elapsed();
    // Within the -to timeout of 5 s (a killed worker's socket closes at once: well within).
    assert!(took < Duration::from_secs(6), "reported after {took:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    // An error, not a panic (101): one line naming the worker.
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    let lines: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("RPC worker"))
        .collect();
    assert_eq!(lines.len(), 1, "{stderr}");
    assert!(
        lines[0].contains(&format!("RPC worker {}: ", b.endpoint)),
        "{}",
        lines[0]
    );
    assert!(
        !out.stdout.is_empty(),
        "it generated before the worker died"
    );
}

#[test]
fn the_connection_is_shared_by_a_workers_devices() {
    let Some(bin) = worker_binary() else { return };
    let w = RpcWorker::start(&bin);
    let ws =
        Worker::connect_all(std::slice::from_ref(&w.endpoint), Duration::from_secs(5)).unwrap();
    assert_eq!(ws.len(), 1);
    assert_eq!(ws[0].name, "RPC0");
    assert_eq!(ws[0].endpoint, w.endpoint);
    assert!(ws[0].memory().unwrap().1 > 0);
}

/// The text of a `/completion` stream: its events' `content`, in order.
fn streamed_text(body: &[u8]) -> String {
    String::from_utf8_lossy(body)
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter_map(|d| serde_json::from_str::<serde_json::Value>(d).ok())
        .filter_map(|v| v["content"].as_str().map(str::to_string))
        .collect()
}

/// Eight concurrent greedy streams, one per slot, each its text.
fn eight_streams(port: u16) -> Vec<String> {
    let threads: Vec<_> = (0..8)
        .map(|i| {
            std::thread::spawn(move || {
                let body = serde_json::json!({
                    "prompt": format!("Write about the number {i}. Once upon a time"),
                    "n_predict": 24,
                    "temperature": 0,
                    "stream": true,
                });
                let r = http::post(port, "/completion", &body);
                assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
                streamed_text(&r.body)
            })
        })
        .collect();
    threads.into_iter().map(|t| t.join().unwrap()).collect()
}

#[test]
fn the_server_runs_on_workers_and_answers_503_naming_a_dead_one() {
    let Some(p) = model_path(MODELS[0].0) else {
        return;
    };
    let Some((a, mut b)) = two_workers() else {
        return;
    };
    let rpc_list = format!("{},{}", a.endpoint, b.endpoint);
    // Eight slots of 256 positions each; a context shift when one fills.
    let common_args = ["-np", "8", "-c", "2048", "--context-shift", "--temp", "0"];
    let local = server::start_with(&p, &common_args);
    let want = eight_streams(local.port);
    drop(local);
    let mut args = common_args.to_vec();
    args.extend(["--rpc", &rpc_list, "-ngl", "999", "-to", "5"]);
    let mut srv = server::start_with(&p, &args);
    let got = eight_streams(srv.port);
    assert!(want.iter().all(|t| !t.is_empty()), "{want:?}");
    assert_eq!(got, want, "greedy streams differ with --rpc");

    // 300 tokens in a slot of 256 positions: the context shifts on the workers' caches.
    let body = serde_json::json!({
        "prompt": "Tell me a long story about a dragon.",
        "n_predict": 300,
        "temperature": 0,
        "ignore_eos": true,
    });
    let r = http::post(srv.port, "/completion", &body);
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(r.json()["tokens_predicted"], 300, "{}", r.json());

    // A worker killed mid-request: that request and every later one get a 503 naming it, and
    // /health reports it, while the process stays up.
    let port = srv.port;
    let in_flight = std::thread::spawn(move || {
        let body = serde_json::json!({
            "prompt": "Count to a million:",
            "n_predict": 100000,
            "temperature": 0,
            "ignore_eos": true,
        });
        http::post(port, "/completion", &body)
    });
    std::thread::sleep(Duration::from_millis(1500));
    b.child.kill().unwrap();
    let killed = Instant::now();
    let r = in_flight.join().unwrap();
    assert!(
        killed.elapsed() < Duration::from_secs(6),
        "{:?}",
        killed.elapsed()
    );
    let names_worker = |r: &http::Reply| {
        assert_eq!(r.status, 503, "{}", String::from_utf8_lossy(&r.body));
        let msg = r.json()["error"]["message"].as_str().unwrap().to_string();
        assert!(msg.contains(&format!("RPC worker {}", b.endpoint)), "{msg}");
    };
    names_worker(&r);
    for stream in [false, true] {
        let body = serde_json::json!({"prompt": "Hello", "n_predict": 4, "stream": stream});
        names_worker(&http::post(srv.port, "/completion", &body));
    }
    let health = http::send("127.0.0.1", srv.port, "GET", "/health", &[], "");
    names_worker(&health);
    assert!(srv.child.try_wait().unwrap().is_none(), "the server exited");
}

#[test]
fn embeddings_answer_503_naming_a_dead_worker() {
    let Some(p) = model_path(MODELS[0].0) else {
        return;
    };
    let Some((a, mut b)) = two_workers() else {
        return;
    };
    let rpc_list = format!("{},{}", a.endpoint, b.endpoint);
    let args = [
        "--embedding",
        "--pooling",
        "mean",
        "-c",
        "512",
        "--rpc",
        &rpc_list,
        "-ngl",
        "999",
        "-to",
        "5",
    ];
    let srv = server::start_with(&p, &args);
    let body = serde_json::json!({"input": "hello world"});
    let r = http::post(srv.port, "/v1/embeddings", &body);
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    b.child.kill().unwrap();
    b.child.wait().unwrap();
    let r = http::post(srv.port, "/v1/embeddings", &body);
    assert_eq!(r.status, 503, "{}", String::from_utf8_lossy(&r.body));
    let msg = r.json()["error"]["message"].as_str().unwrap().to_string();
    assert!(msg.contains(&format!("RPC worker {}", b.endpoint)), "{msg}");
}

#[test]
fn list_devices_and_device_name_the_workers_devices_as_llama_cpp() {
    let Some((a, b)) = two_workers() else {
        return;
    };
    let rpc_list = format!("{},{}", a.endpoint, b.endpoint);
    // As llama.cpp's common_print_available_devices: the CPU is not listed.
    let out = llamafile(&["--rpc", &rpc_list, "--list-devices"]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3, "{text}");
    assert_eq!(lines[0], "Available devices:");
    for (i, (line, ep)) in lines[1..]
        .iter()
        .zip([&a.endpoint, &b.endpoint])
        .enumerate()
    {
        let rest = line
            .strip_prefix(&format!("  RPC{i}: {ep} ("))
            .unwrap_or_else(|| panic!("{line}"));
        let (total, free) = rest
            .strip_suffix(" MiB free)")
            .and_then(|r| r.split_once(" MiB, "))
            .unwrap_or_else(|| panic!("{line}"));
        let (total, free): (u64, u64) = (total.parse().unwrap(), free.parse().unwrap());
        assert!(total > 0 && free <= total, "{line}");
    }
    let out = llamafile(&["--list-devices"]);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "Available devices:\n  (none)\n"
    );

    let Some(p) = model_path(MODELS[0].0) else {
        return;
    };
    let m = p.to_str().unwrap();
    let run = |device: &str| {
        llamafile(&[
            "-m", m, "-p", "hi", "-n", "2", "--rpc", &rpc_list, "-ngl", "999", "--device", device,
        ])
    };
    // Only the device named takes blocks.
    let out = run("RPC1");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains(&format!("RPC1 ({}): layers 0..30", b.endpoint)),
        "{stderr}"
    );
    assert!(!stderr.contains("RPC0"), "{stderr}");
    // none: everything on the CPU.
    let out = run("none");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(!stderr.contains("RPC"), "{stderr}");
    common::assert_one_line_error(&run("RPC2"), "--device: invalid device: RPC2");
    common::assert_one_line_error(&run("CPU"), "--device: invalid device: CPU");
}
