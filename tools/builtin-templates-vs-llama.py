#!/usr/bin/env python3
"""Compares `--chat-template NAME` for every built-in format name with llama-server's.

For each name llama-server lists (its `--help`), starts llama-server with `--no-jinja
--chat-template NAME` (the route on which it renders a name with its hand-written C++,
`llm_chat_apply_template`) and llamafile with `--chat-template NAME`, both on SmolLM2, and POSTs
the same conversations to both servers' /apply-template. Prints one line per name and a summary;
exits 1 when a format renders differently, or when either side knows a name the other does not.
Renderings where the request asks for no assistant opening, or ends on a reply (which
llama-server then continues), are counted apart: they differ in how a request is read, not in
the format.

Also shows what llama-server does with a name under its default `--jinja`.

Usage: tools/builtin-templates-vs-llama.py [LLAMA_CPP_BIN_DIR] (default ~/.cache/llama-cpp-ref/bin)
with llamafile from target/release (cargo build --release).
"""

import json
import os
import re
import subprocess
import sys
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = sys.argv[1] if len(sys.argv) > 1 else os.path.expanduser("~/.cache/llama-cpp-ref/bin")
OURS = os.path.join(ROOT, "target/release/llamafile")
MODELS = os.environ.get("LLAMAFILE_MODELS", os.path.expanduser("~/.cache/llamafile-rs/models"))
MODEL = os.path.join(MODELS, "SmolLM2-135M-Instruct.Q4_1.gguf")
PORT = 18981

CONVERSATIONS = [
    # A system prompt, a reply and a second user turn, with stray whitespace to show trimming.
    [
        {"role": "system", "content": "Be brief.\n"},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": " Hello! "},
        {"role": "user", "content": "Name a color."},
    ],
    # No system prompt, ending on a reply.
    [
        {"role": "user", "content": " Hi "},
        {"role": "assistant", "content": "Hello!"},
    ],
    # Two system prompts, a tool's answer, text past ASCII.
    [
        {"role": "system", "content": "A"},
        {"role": "system", "content": "B"},
        {"role": "user", "content": "Grüß dich\u00a0"},
        {"role": "tool", "content": " 42 "},
    ],
]

# Each conversation with and without the assistant's opening.
CASES = [(m, add) for m in CONVERSATIONS for add in (True, False)]


def post(path, body):
    req = urllib.request.Request(
        f"http://127.0.0.1:{PORT}{path}",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.load(r)


def serve(argv):
    env = dict(os.environ, LD_LIBRARY_PATH=BIN)
    p = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(600):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{PORT}/health", timeout=1) as r:
                if r.status == 200:
                    return p
        except Exception:
            pass
        if p.poll() is not None:
            raise SystemExit(f"{argv[0]} exited with {p.returncode}: {' '.join(argv)}")
        time.sleep(0.1)
    p.kill()
    raise SystemExit(f"{argv[0]} did not start")


def prompts(argv):
    p = serve(argv)
    try:
        return [
            post("/apply-template", {"messages": m, "add_generation_prompt": add})["prompt"]
            for m, add in CASES
        ]
    finally:
        p.kill()
        p.wait()


def llama_names():
    help_text = subprocess.run(
        [os.path.join(BIN, "llama-server"), "--help"],
        env=dict(os.environ, LD_LIBRARY_PATH=BIN), capture_output=True, text=True,
    ).stdout
    m = re.search(r"list of built-in templates:\s*\n\s*(.*?)\n\s*\(env: LLAMA_ARG_CHAT_TEMPLATE\)",
                  help_text, re.S)
    return [n.strip() for n in " ".join(m.group(1).split()).split(",")]


def our_names():
    err = subprocess.run(
        [OURS, "-m", MODEL, "--nobrowser", "--port", "0", "--chat-template", "no-such-format"],
        capture_output=True, text=True,
    ).stderr
    m = re.search(r"not a built-in format \((.*?)\)", err)
    return [n.strip() for n in m.group(1).split(",")]


def main():
    theirs, ours = llama_names(), our_names()
    bad = 0
    for n in sorted(set(theirs) ^ set(ours)):
        print(f"{n}: known to {'llama-server' if n in theirs else 'llamafile'} only")
        bad += 1
    common = [n for n in theirs if n in ours]
    request_diffs = 0
    for name in common:
        want = prompts([os.path.join(BIN, "llama-server"), "-m", MODEL, "--port", str(PORT),
                        "-t", "2", "-np", "1", "--no-jinja", "--chat-template", name])
        got = prompts([OURS, "-m", MODEL, "--nobrowser", "--port", str(PORT), "-t", "2",
                       "-np", "1", "--chat-template", name])
        # Where the request asks for no assistant opening, or ends on a reply (which
        # llama-server continues), the difference is in the request's handling, not the format.
        format_diffs, other = [], 0
        for (messages, add), w, g in zip(CASES, want, got):
            if w == g:
                continue
            if add and messages[-1]["role"] != "assistant":
                format_diffs.append((w, g))
            else:
                other += 1
        request_diffs += other
        if format_diffs:
            bad += 1
            print(f"{name}: {len(format_diffs)} renderings differ")
            for w, g in format_diffs[:2]:
                print(f"    llama-server {w!r}\n    llamafile    {g!r}")
        else:
            formats = sum(1 for m, a in CASES if a and m[-1]["role"] != "assistant")
            print(f"{name}: {formats} renderings identical"
                  + (f"; {other} differ in the request's handling" if other else ""))
    print(f"{len(common)} names compared, {bad} differ"
          f" ({len(theirs)} names in llama-server, {len(ours)} in llamafile);"
          f" {request_diffs} renderings differ in add_generation_prompt / a final reply")
    jinja = prompts([os.path.join(BIN, "llama-server"), "-m", MODEL, "--port", str(PORT),
                     "-t", "2", "-np", "1", "--chat-template", "llama3"])[0]
    print(f"llama-server --jinja (its default) --chat-template llama3 renders: {jinja!r}")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
