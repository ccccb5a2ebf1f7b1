#!/usr/bin/env python3
"""Records llama-server's answers for the server tests: embeddings of SmolLM2 under each
pooling type, and /infill completions of Qwen2.5-Coder-0.5B. Writes
tests/data/server/embeddings-smollm2.json and tests/data/server/infill-qwen-0.5b.json.

Usage: tools/make-server-refs.py [LLAMA_CPP_BIN_DIR] (default ~/.cache/llama-cpp-ref-avx2/bin,
llama.cpp 0c1e570). The models come from packaging/fetch-models.sh.
"""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import llama_server_ref  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = sys.argv[1] if len(sys.argv) > 1 else os.path.expanduser("~/.cache/llama-cpp-ref-avx2/bin")
MODELS = os.environ.get("LLAMAFILE_MODELS", os.path.expanduser("~/.cache/llamafile-rs/models"))
OUT = os.path.join(ROOT, "tests/data/server")
PORT = 18977

EMBED_INPUTS = ["hello world", "The capital of France is Paris."]

INFILL_CASES = [
    {
        "input_prefix": "def add(a, b):\n    ",
        "input_suffix": "\n\nprint(add(1, 2))\n",
    },
    {
        "input_prefix": "def area(r):\n    ",
        "input_suffix": "\n",
        "prompt": "return",
        "input_extra": [
            {"filename": "consts.py", "text": "PI = 3.14159\n"},
            {"filename": "shapes.py", "text": "def square(s):\n    return s * s\n"},
        ],
    },
]


def post(path, body):
    return llama_server_ref.post(PORT, path, body)


def serve(model, args):
    return llama_server_ref.serve(BIN, os.path.join(MODELS, model), PORT, args)


def embeddings():
    out = {"model": "SmolLM2-135M-Instruct.Q4_1.gguf", "inputs": EMBED_INPUTS, "pooled": {}}
    for pooling in ["mean", "cls", "last"]:
        p = serve(out["model"], ["--embedding", "--pooling", pooling, "-c", "512", "-np", "1"])
        try:
            r = post("/v1/embeddings", {"input": EMBED_INPUTS})
            out["pooled"][pooling] = [d["embedding"] for d in r["data"]]
            out.setdefault("usage", r["usage"])
        finally:
            p.kill()
            p.wait()
    p = serve(out["model"], ["--embedding", "--pooling", "none", "-c", "512", "-np", "1"])
    try:
        r = post("/embeddings", {"input": EMBED_INPUTS[0]})
        out["none"] = r[0]["embedding"]
    finally:
        p.kill()
        p.wait()
    return out


def infill():
    model = "qwen2.5-coder-0.5b-instruct.gguf"
    out = {"model": model, "server_args": ["-c", "4096", "-np", "1"], "cases": []}
    p = serve(model, out["server_args"])
    try:
        for case in INFILL_CASES:
            body = dict(case, n_predict=16, temperature=0, cache_prompt=False)
            r = post("/infill", body)
            out["cases"].append({
                "request": body,
                "content": r["content"],
                "tokens_evaluated": r["tokens_evaluated"],
                "tokens_predicted": r["tokens_predicted"],
            })
    finally:
        p.kill()
        p.wait()
    return out


def main():
    os.makedirs(OUT, exist_ok=True)
    for name, make in [("embeddings-smollm2.json", embeddings), ("infill-qwen-0.5b.json", infill)]:
        with open(os.path.join(OUT, name), "w") as f:
            json.dump(make(), f)
            f.write("\n")
        print("wrote", name)


if __name__ == "__main__":
    main()
