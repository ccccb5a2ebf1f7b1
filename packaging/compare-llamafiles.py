#!/usr/bin/env python3
"""Runs a llamafile built for another platform (under wine or qemu-user) beside the x86-64
Linux one and checks that they agree: the same greedy tokens on the reference prompts of
SmolLM2 (tests/data/reference/; with --exact, equal throughout with bit-identical top-5 logits,
else equal up to a step where the reference's top two logits were a near-tie, if any), the same
`--tokenize` output, and a
server that answers `/health` and a chat completion with the same text.

usage: compare-llamafiles.py --reference 'CMD' --candidate 'CMD' [--prompts all|short]
                             [-n N] [--exact] [--tokenize] [--server] [--label TEXT]

Each CMD is a shell-quoted command line that runs a packed SmolLM2 llamafile (its `.args`
names the model), e.g. 'wine smollm2.exe' or 'qemu-aarch64 -L /usr/aarch64-linux-gnu
smollm2.aarch64.llamafile'. Exit status 0 when everything agrees, 1 otherwise (each
difference said in a line). Used by packaging/test-windows.sh and test-aarch64-llamafile.sh.
"""

import argparse
import json
import os
import shlex
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REFERENCE = os.path.join(ROOT, "tests/data/reference/SmolLM2-135M-Instruct.Q4_1.json")
SHORT_PROMPT = "The capital of France is"
# See compare_generation.
NEAR_TIE = 1.0


def run(cmd, args, timeout):
    """The stdout of a command that must succeed. Output goes through files, not pipes: the
    first wine program of a session starts wine's services, which would inherit a pipe and
    hold it open long after the program exits. A failure says all a later reader needs to
    tell its causes apart: the exit status (or signal), how long the command ran, and the end
    of its stderr, or that there was none."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        start = time.monotonic()
        proc = subprocess.run(
            cmd + args, stdin=subprocess.DEVNULL, stdout=out, stderr=err, timeout=timeout
        )
        took = time.monotonic() - start
        out.seek(0)
        err.seek(0)
        if proc.returncode != 0:
            status = (
                f"was killed by signal {-proc.returncode}"
                if proc.returncode < 0
                else f"exited {proc.returncode}"
            )
            text = err.read().decode(errors="replace").strip()
            said = f"its stderr ends:\n{text[-2000:]}" if text else "nothing on its stderr"
            raise RuntimeError(f"{shlex.join(cmd + args)} {status} after {took:.1f} s, {said}")
        return out.read()


def trace(cmd, prompt_file, n, work, tag, timeout):
    path = os.path.join(work, f"{tag}.jsonl")
    run(cmd, ["-f", prompt_file, "-n", str(n), "--temp", "0", "--trace-tokens", path], timeout)
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def compare_generation(ref, cand, prompts, n, work, timeout, exact):
    """Greedy tokens must be equal; without `exact`, a divergence is allowed only at a near-tie
    of the reference (its top two logits less than NEAR_TIE apart), the criterion
    tests/reference.rs holds the engine to against llama.cpp."""
    failures = 0
    for i, prompt in enumerate(prompts):
        prompt_file = os.path.join(work, f"prompt{i}.txt")
        with open(prompt_file, "w") as f:
            f.write(prompt)
        a = trace(ref, prompt_file, n, work, f"ref{i}", timeout)
        b = trace(cand, prompt_file, n, work, f"cand{i}", timeout)
        ids_a = [s["id"] for s in a]
        ids_b = [s["id"] for s in b]
        name = json.dumps(prompt[:40])
        same = next((k for k, (x, y) in enumerate(zip(ids_a, ids_b)) if x != y), None)
        if same is None and len(ids_a) == len(ids_b) and ids_a:
            diff = max(
                abs(x[1] - y[1]) if x[0] == y[0] else float("inf")
                for sa, sb in zip(a, b)
                for x, y in zip(sa["top"], sb["top"])
            )
            if exact and diff != 0:
                print(f"  same {len(ids_a)} greedy tokens for {name}, but top-5 logits DIFFER (by up to {diff:.3g})")
                failures += 1
                continue
            print(f"  same {len(ids_a)} greedy tokens for {name} (largest top-5 logit difference {diff:.3g})")
            continue
        k = same if same is not None else min(len(ids_a), len(ids_b))
        top = a[k]["top"] if k < len(a) else None
        gap = top[0][1] - top[1][1] if top else None
        if not exact and gap is not None and gap < NEAR_TIE:
            print(f"  same first {k} greedy tokens for {name}, then a near-tie (reference's top-2 gap {gap:.3f}) went the other way")
            continue
        print(f"  DIFFERENT greedy tokens for {name} from step {k}:\n    reference {ids_a}\n    candidate {ids_b}")
        failures += 1
    return failures


def compare_tokenize(ref, cand, texts, work, timeout):
    failures = 0
    for i, text in enumerate(texts):
        path = os.path.join(work, f"tok{i}.txt")
        with open(path, "w", encoding="utf-8", newline="") as f:
            f.write(text)
        args = ["--tokenize", "--no-escape", "-f", path]
        a, b = run(ref, args, timeout), run(cand, args, timeout)
        if a != b:
            print(f"  DIFFERENT --tokenize of {json.dumps(text[:40])}: {a!r} vs {b!r}")
            failures += 1
    # An argument that is not ASCII crosses the command line intact (UTF-16 on Windows).
    args = ["--tokenize", "-p", "café naïve 中文 🦙"]
    a, b = run(ref, args, timeout), run(cand, args, timeout)
    if a != b:
        print(f"  DIFFERENT --tokenize of a non-ASCII -p: {a!r} vs {b!r}")
        failures += 1
    if failures == 0:
        print(f"  same --tokenize output for {len(texts) + 1} texts")
    return failures


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http(port, path, body=None, timeout=60):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}", data=data, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return resp.status, resp.read()


def chat(cmd, timeout):
    """Starts a server from `cmd`, waits for /health, and returns the text of one greedy chat
    completion."""
    port = free_port()
    err = tempfile.TemporaryFile()
    proc = subprocess.Popen(
        cmd + ["--server", "--nobrowser", "--port", str(port), "-np", "1"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=err,
    )
    try:
        deadline = time.time() + timeout
        while True:
            if proc.poll() is not None:
                err.seek(0)
                raise RuntimeError(
                    f"server {shlex.join(cmd)} exited {proc.returncode}: "
                    + err.read().decode(errors="replace").strip()[-400:]
                )
            try:
                status, _ = http(port, "/health", timeout=2)
                if status == 200:
                    break
            except OSError:
                pass
            if time.time() > deadline:
                raise RuntimeError(f"server {shlex.join(cmd)}: no /health within {timeout} s")
            time.sleep(0.2)
        body = {
            "messages": [{"role": "user", "content": "Name three primary colors."}],
            "max_tokens": 16,
            "temperature": 0,
        }
        status, reply = http(port, "/v1/chat/completions", body, timeout=timeout)
        if status != 200:
            raise RuntimeError(f"chat completion answered {status}")
        return json.loads(reply)["choices"][0]["message"]["content"]
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        err.close()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--reference", required=True)
    p.add_argument("--candidate", required=True)
    p.add_argument("--prompts", choices=["all", "short"], default="all")
    p.add_argument("-n", type=int, default=48)
    p.add_argument("--tokenize", action="store_true")
    p.add_argument("--server", action="store_true")
    p.add_argument("--label", default="candidate")
    p.add_argument("--exact", action="store_true", help="no divergence allowed, not even at a near-tie, and top-5 logits bit-identical")
    p.add_argument("--timeout", type=float, default=300)
    opts = p.parse_args()
    ref, cand = shlex.split(opts.reference), shlex.split(opts.candidate)
    with open(REFERENCE) as f:
        reference = json.load(f)
    if opts.prompts == "all":
        prompts = [g["prompt"] for g in reference["generate"]]
    else:
        prompts = [SHORT_PROMPT]
    failures = 0
    with tempfile.TemporaryDirectory() as work:
        print(f"{opts.label}: greedy tokens against {shlex.join(ref)}")
        failures += compare_generation(ref, cand, prompts, opts.n, work, opts.timeout, opts.exact)
        if opts.tokenize:
            texts = [t["text"] for t in reference["tokenize"]]
            failures += compare_tokenize(ref, cand, texts, work, opts.timeout)
        if opts.server:
            a, b = chat(ref, opts.timeout), chat(cand, opts.timeout)
            if a != b or not b:
                print(f"  DIFFERENT chat completion: {a!r} vs {b!r}")
                failures += 1
            else:
                print(f"  server: /health 200, the same chat completion {b!r}")
    if failures:
        print(f"{opts.label}: {failures} difference(s)")
        return 1
    print(f"{opts.label}: all the same")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (RuntimeError, subprocess.TimeoutExpired, OSError) as e:
        print(f"compare-llamafiles: {e}", file=sys.stderr)
        sys.exit(1)
