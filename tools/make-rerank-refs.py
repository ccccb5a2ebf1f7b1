#!/usr/bin/env python3
"""Records llama-server's /v1/rerank answers on the synthetic Qwen3 rerankers of
tools/synth-model.py (`qwen3-rerank`, with the rerank prompt template, and
`qwen3-rerank-plain`, without), for tests/server/rerank.rs. Writes
tests/data/server/rerank-qwen3.json: each model's SHA-256 and, per request, the answer.

Usage: tools/make-rerank-refs.py [LLAMA_CPP_BIN_DIR] (default ~/.cache/llama-cpp-ref/bin).
The models are written to $LLAMAFILE_SYNTH (default ~/.cache/llamafile-rs/synth), with the
vocabulary of SmolLM2 (packaging/fetch-models.sh smollm2).
"""

import hashlib
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import llama_server_ref  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = sys.argv[1] if len(sys.argv) > 1 else os.path.expanduser("~/.cache/llama-cpp-ref/bin")
MODELS = os.environ.get("LLAMAFILE_MODELS", os.path.expanduser("~/.cache/llamafile-rs/models"))
SYNTH = os.environ.get("LLAMAFILE_SYNTH", os.path.expanduser("~/.cache/llamafile-rs/synth"))
OUT = os.path.join(ROOT, "tests/data/server/rerank-qwen3.json")
PORT = 18978

DOCUMENTS = llama_server_ref.RERANK_DOCUMENTS

# Each request is sent to every model; the test replays them.
REQUESTS = [
    *llama_server_ref.RERANK_REQUESTS,
    {"path": "/rerank", "body": {"query": "Machine learning is", "texts": DOCUMENTS[:3],
                                 "return_text": True}},
]


def post(path, body):
    return llama_server_ref.post(PORT, path, body)


def serve(model, args):
    return llama_server_ref.serve(BIN, model, PORT, args)


def synth(family):
    path = os.path.join(SYNTH, f"{family}-f16.gguf")
    if not os.path.exists(path):
        os.makedirs(SYNTH, exist_ok=True)
        subprocess.run(
            [sys.executable, os.path.join(ROOT, "tools/synth-model.py"), family, "f16", path,
             "--vocab-from", os.path.join(MODELS, "SmolLM2-135M-Instruct.Q4_1.gguf")],
            check=True,
        )
    with open(path, "rb") as f:
        return path, hashlib.sha256(f.read()).hexdigest()


def main():
    out = {"requests": REQUESTS, "models": []}
    for family in ["qwen3-rerank", "qwen3-rerank-plain"]:
        path, sha = synth(family)
        # One slot: each document is scored alone, as the test's server does.
        p = serve(path, ["--rerank", "-c", "1024", "-np", "1"])
        try:
            answers = [post(r["path"], r["body"]) for r in REQUESTS]
        finally:
            p.kill()
            p.wait()
        out["models"].append({"family": family, "type": "f16", "model_sha256": sha,
                              "answers": answers})
    llama_server_ref.write_json(OUT, out)


if __name__ == "__main__":
    main()
