#!/usr/bin/env python3
"""Many concurrent streaming clients from one address, against our server and llama-server.

Starts each server in turn on the same model, slots and threads, fires N streaming /completion
requests at once from 127.0.0.1 (as behind a reverse proxy), and reports per round: how many
completed with a final event, how many were refused or failed, the aggregate generation rate
(tokens streamed / wall time), and the server's peak resident memory. Rounds alternate between
the two servers so that a noisy neighbour hurts both alike; medians and the ratio ours/theirs
are printed at the end.

    tools/streams-vs-llama-server.py [-n STREAMS] [-r ROUNDS] [-np SLOTS] [-t THREADS]
                                     [--predict N] MODEL.gguf

LLAMAFILE (default target/release/llamafile) and LLAMA_SERVER (default
~/.cache/llama-cpp-ref/bin/llama-server) name the two programs; --only ours skips llama-server.
"""
import argparse
import http.client
import json
import os
import socket
import statistics
import subprocess
import sys
import threading
import time


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(port, proc, limit=120):
    start = time.time()
    while time.time() - start < limit:
        if proc.poll() is not None:
            sys.exit(f"server exited with {proc.returncode}")
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            c.request("GET", "/health")
            if c.getresponse().status == 200:
                return
        except OSError:
            pass
        time.sleep(0.2)
    sys.exit("server not ready")


def rss_kib(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def one_stream(port, i, n_predict, out):
    body = json.dumps({"prompt": f"Item {i}: a short note about the number {i}",
                       "n_predict": n_predict, "ignore_eos": True, "stream": True,
                       "temperature": 0})
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
        c.request("POST", "/completion", body, {"Content-Type": "application/json"})
        r = c.getresponse()
        if r.status != 200:
            out[i] = ("refused", r.status, 0)
            return
        tokens, done = 0, False
        for line in r:
            if not line.startswith(b"data: "):
                continue
            ev = json.loads(line[6:])
            if ev.get("stop"):
                done = True
                tokens = ev.get("tokens_predicted", tokens)
                break
            tokens += 1
        out[i] = ("ok" if done else "cut", 200, tokens)
    except Exception as e:  # noqa: BLE001 - every failure is counted, none is fatal
        out[i] = ("error", f"{type(e).__name__}: {e}", 0)


def round_on(cmd, n, n_predict):
    port = free_port()
    proc = subprocess.Popen(cmd + ["--port", str(port)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        wait_ready(port, proc)
        out = [None] * n
        peak = [rss_kib(proc.pid)]
        stop = threading.Event()

        def watch():
            while not stop.is_set():
                peak[0] = max(peak[0], rss_kib(proc.pid))
                time.sleep(0.1)

        w = threading.Thread(target=watch)
        w.start()
        threads = [threading.Thread(target=one_stream, args=(port, i, n_predict, out))
                   for i in range(n)]
        t0 = time.time()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall = time.time() - t0
        stop.set()
        w.join()
        ok = sum(1 for o in out if o and o[0] == "ok")
        tokens = sum(o[2] for o in out if o)
        kinds = {}
        for o in out:
            if o and o[0] != "ok":
                kinds[f"{o[0]} {o[1]}"[:80]] = kinds.get(f"{o[0]} {o[1]}"[:80], 0) + 1
        for k, v in kinds.items():
            print(f"  {v} x {k}", flush=True)
        return {"ok": ok, "failed": n - ok, "tok_s": tokens / wall, "wall": wall,
                "peak_mib": peak[0] / 1024}
    finally:
        proc.terminate()
        proc.wait()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("-n", type=int, default=256, help="concurrent streams")
    ap.add_argument("-r", type=int, default=3, help="rounds of each server")
    ap.add_argument("-np", type=int, default=8, help="slots")
    ap.add_argument("-t", type=int, default=2, help="threads")
    ap.add_argument("-c", type=int, default=8192, help="context (all slots)")
    ap.add_argument("--predict", type=int, default=16)
    ap.add_argument("--only", choices=["ours", "both"], default="both")
    a = ap.parse_args()
    ours = os.environ.get("LLAMAFILE", "target/release/llamafile")
    theirs = os.environ.get("LLAMA_SERVER",
                            os.path.expanduser("~/.cache/llama-cpp-ref/bin/llama-server"))
    os.environ["LD_LIBRARY_PATH"] = os.path.dirname(theirs) + ":" + os.environ.get(
        "LD_LIBRARY_PATH", "")
    common = ["-m", a.model, "-np", str(a.np), "-c", str(a.c), "-t", str(a.t),
              "--host", "127.0.0.1"]
    servers = {"ours": [ours, "--server", "--nobrowser"] + common}
    if a.only == "both":
        servers["llama-server"] = [theirs] + common
    results = {k: [] for k in servers}
    for r in range(a.r):
        for name, cmd in servers.items():
            res = round_on(cmd, a.n, a.predict)
            results[name].append(res)
            print(f"round {r} {name:12s} ok {res['ok']}/{a.n} failed {res['failed']} "
                  f"{res['tok_s']:.1f} tok/s in {res['wall']:.1f} s, peak {res['peak_mib']:.0f} MiB",
                  flush=True)
    med = {k: statistics.median(x["tok_s"] for x in v) for k, v in results.items()}
    for k, v in med.items():
        print(f"median {k}: {v:.1f} tok/s")
    if "llama-server" in med:
        print(f"ratio ours/llama-server: {med['ours'] / med['llama-server']:.2f}")


if __name__ == "__main__":
    main()
