#!/usr/bin/env python3
"""Records llama.cpp's answers on the synthetic BERT models of tools/synth-model.py (`bert`, an
embedding model with mean pooling, and `bert-rerank`, a cross-encoder with the cls head), for
tests/bert.rs. Writes tests/data/server/bert.json: each model's SHA-256, the WordPiece tokens
llama-server's /tokenize gives for TEXTS (with [CLS] and [SEP]), its /v1/embeddings and
/embedding answers (mean pooling, then --pooling cls and none), and its /v1/rerank answers.

Usage: tools/make-bert-refs.py [LLAMA_CPP_BIN_DIR] (default ~/.cache/llama-cpp-ref/bin).
The models are written to $LLAMAFILE_SYNTH (default ~/.cache/llamafile-rs/synth).
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
SYNTH = os.environ.get("LLAMAFILE_SYNTH", os.path.expanduser("~/.cache/llamafile-rs/synth"))
OUT = os.path.join(ROOT, "tests/data/server/bert.json")
PORT = 18979

# Words in the vocabulary, words cut into pieces, words that are [UNK] (a q or a z), accents
# stripped, upper case, punctuation and symbols split off, CJK one character at a time,
# control characters dropped, a [SEP] written in the text (a special token only when parsed).
TEXTS = [
    "Machine learning is a field of study in artificial intelligence.",
    "Héllo, WORLD! The panda's café is in Paris (France).",
    "Swimming fishes jumped quickly over 42 lazy zebras; $5 & 7% off!",
    "東京 river\tbank\u0007 money [SEP] data",
    "   ",
    "hi",
]

RERANK_REQUESTS = llama_server_ref.RERANK_REQUESTS


def synth(family):
    path = os.path.join(SYNTH, f"{family}-f16.gguf")
    if not os.path.exists(path):
        os.makedirs(SYNTH, exist_ok=True)
        subprocess.run([sys.executable, os.path.join(ROOT, "tools/synth-model.py"), family,
                        "f16", path], check=True)
    with open(path, "rb") as f:
        return path, hashlib.sha256(f.read()).hexdigest()


def with_server(model, args, fn):
    p = llama_server_ref.serve(BIN, model, PORT, args)
    try:
        return fn(lambda path, body: llama_server_ref.post(PORT, path, body))
    finally:
        p.kill()
        p.wait()


def main():
    path, sha = synth("bert")
    out = {"texts": TEXTS, "models": []}
    nonempty = [t for t in TEXTS if t.strip()]

    def embeddings(post):
        return {
            "tokens": [post("/tokenize", {"content": t, "add_special": True})["tokens"]
                       for t in TEXTS],
            "tokens_parsed": post("/tokenize", {"content": TEXTS[3], "add_special": True,
                                                "parse_special": True})["tokens"],
            "v1": post("/v1/embeddings", {"input": nonempty}),
            "native": post("/embedding", {"content": TEXTS[0]}),
        }

    def pooled(post):
        return post("/v1/embeddings", {"input": nonempty})

    def native(post):
        return post("/embedding", {"content": TEXTS[1]})

    entry = {"family": "bert", "model_sha256": sha}
    entry.update(with_server(path, ["--embedding", "-c", "256", "-np", "1", "-fa", "off"], embeddings))
    entry["cls"] = with_server(path, ["--embedding", "--pooling", "cls", "-c", "256", "-fa", "off", "-np",
                                      "1"], pooled)
    entry["none"] = with_server(path, ["--embedding", "--pooling", "none", "-c", "256", "-fa", "off", "-np",
                                       "1"], native)
    out["models"].append(entry)

    path, sha = synth("bert-rerank")
    answers = with_server(path, ["--rerank", "-c", "256", "-np", "1", "-fa", "off"],
                          lambda post: [post(r["path"], r["body"]) for r in RERANK_REQUESTS])
    out["models"].append({"family": "bert-rerank", "model_sha256": sha,
                          "requests": RERANK_REQUESTS, "answers": answers})
    llama_server_ref.write_json(OUT, out)


if __name__ == "__main__":
    main()
