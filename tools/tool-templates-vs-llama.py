#!/usr/bin/env python3
"""Compares how each tool-using chat template in llama.cpp's `models/templates/` renders a
request with two tools, an assistant turn that calls both, and their results, in llama-server
(`--jinja --chat-template-file T`) and in llamafile (`--chat-template-file T`): both on SmolLM2,
the same JSON POSTed to each server's /apply-template. Prints one line per template (`same`, or
the first difference with context) and a summary; exits 1 when any template renders differently
or fails on one side only.

Templates that print today's date are rendered on both sides within the same minute.

Usage: tools/tool-templates-vs-llama.py [LLAMA_CPP_BIN_DIR] (default ~/.cache/llama-cpp-ref/bin)
with llamafile from target/release (cargo build --release) and llama.cpp's source tree from
../shared/bench/build-llama-cpp.sh (its models/templates). Set TEMPLATES=a,b to pick some.
"""

import glob
import json
import os
import subprocess
import sys
import urllib.error
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = sys.argv[1] if len(sys.argv) > 1 else os.path.expanduser("~/.cache/llama-cpp-ref/bin")
OURS = os.path.join(ROOT, "target/release/llamafile")
MODELS = os.environ.get("LLAMAFILE_MODELS", os.path.expanduser("~/.cache/llamafile-rs/models"))
MODEL = os.path.join(MODELS, "SmolLM2-135M-Instruct.Q4_1.gguf")
SRC = glob.glob(os.path.expanduser(
    "~/.cache/llama-cpp-ref/src/llama_cpp_python-*/vendor/llama.cpp/models/templates"))
PORT = 18983

TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Get the current weather in a city",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string", "description": "The city name"},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
            "required": ["city"]}}},
    {"type": "function", "function": {
        "name": "get_time", "description": "Get the current time in a time zone",
        "parameters": {"type": "object", "properties": {"zone": {"type": "string"}},
                       "required": ["zone"]}}},
]

MESSAGES = [
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "What is the weather and the time in Paris?"},
    {"role": "assistant", "content": "", "tool_calls": [
        {"id": "call_1", "type": "function",
         "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}},
        {"id": "call_2", "type": "function",
         "function": {"name": "get_time", "arguments": "{\"zone\": \"Europe/Paris\"}"}}]},
    {"role": "tool", "tool_call_id": "call_1", "name": "get_weather",
     "content": "{\"temperature\": 18, \"sky\": \"clear\"}"},
    {"role": "tool", "tool_call_id": "call_2", "name": "get_time", "content": "14:05"},
]

REQUEST = {"messages": MESSAGES, "tools": TOOLS}


def post(path, body):
    req = urllib.request.Request(
        f"http://127.0.0.1:{PORT}{path}", data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, json.load(r)
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")


def serve(argv):
    env = dict(os.environ, LD_LIBRARY_PATH=BIN)
    p = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                         stdin=subprocess.DEVNULL)
    for _ in range(600):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{PORT}/health", timeout=1) as r:
                if r.status == 200:
                    return p, None
        except Exception:
            pass
        if p.poll() is not None:
            return None, p.stderr.read().decode(errors="replace").strip().splitlines()[-1:]
        import time
        time.sleep(0.1)
    p.kill()
    return None, ["no /health in 60 s"]


def render(argv):
    p, err = serve(argv)
    if p is None:
        return None, f"did not start: {err}"
    try:
        status, body = post("/apply-template", REQUEST)
        if status != 200:
            return None, f"{status}: {json.dumps(body)[:200]}"
        return body.get("prompt"), None
    finally:
        p.kill()
        p.wait()


def first_difference(a, b):
    i = next((k for k in range(min(len(a), len(b))) if a[k] != b[k]), min(len(a), len(b)))
    return i, a[max(0, i - 40):i + 40], b[max(0, i - 40):i + 40]


def main():
    if not SRC:
        sys.exit("llama.cpp's source tree is missing: run ../shared/bench/build-llama-cpp.sh")
    paths = sorted(glob.glob(os.path.join(SRC[0], "*.jinja")))
    pick = [t for t in os.environ.get("TEMPLATES", "").split(",") if t]
    paths = [p for p in paths if not pick or any(t in os.path.basename(p) for t in pick)]
    same, differ, failed = [], [], []
    for path in paths:
        name = os.path.basename(path)
        if "tools" not in open(path, encoding="utf-8").read():
            continue
        theirs, their_err = render([os.path.join(BIN, "llama-server"), "-m", MODEL, "--jinja",
                                    "--chat-template-file", path, "--port", str(PORT),
                                    "-c", "512", "-np", "1", "--no-webui"])
        ours, our_err = render([OURS, "-m", MODEL, "--server", "--nobrowser",
                                "--chat-template-file", path, "--port", str(PORT),
                                "-c", "512", "-np", "1"])
        if theirs is None and ours is None:
            print(f"{name}: both refuse (llama-server {their_err}; ours {our_err})")
            same.append(name)
        elif theirs is None or ours is None:
            print(f"{name}: FAILS on one side: llama-server {their_err or 'ok'}; "
                  f"ours {our_err or 'ok'}")
            failed.append(name)
        elif theirs == ours:
            print(f"{name}: same ({len(ours)} chars)")
            same.append(name)
        else:
            at, t, o = first_difference(theirs, ours)
            print(f"{name}: DIFFERS at char {at}\n  llama-server: {t!r}\n  ours:         {o!r}")
            differ.append(name)
    total = len(same) + len(differ) + len(failed)
    print(f"\n{len(same)}/{total} tool templates render as llama-server does; "
          f"{len(differ)} differ, {len(failed)} fail on one side")
    sys.exit(1 if differ or failed else 0)


if __name__ == "__main__":
    main()
