"""Starting llama-server and asking it, for the tools that record its answers as test
references (make-server-refs.py, make-rerank-refs.py)."""

import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request


# Documents every reranker reference ranks (tools/make-rerank-refs.py, tools/make-bert-refs.py),
# and the two requests both send: a plain ranking and one with `top_n`.
RERANK_DOCUMENTS = [
    "A machine is a physical system that uses power to apply forces and control movement.",
    "Learning is the process of acquiring new understanding, knowledge and skills.",
    "Machine learning is a field of study in artificial intelligence concerned with "
    "statistical algorithms that learn from data.",
    "Paris, capitale de la France, est une grande ville européenne.",
    "hi",
    "The giant panda is a bear species endemic to China.",
]
RERANK_REQUESTS = [
    {"path": "/v1/rerank", "body": {"query": "Machine learning is", "documents": RERANK_DOCUMENTS}},
    {"path": "/rerank", "body": {"query": "What is a panda?", "documents": RERANK_DOCUMENTS,
                                 "top_n": 3}},
]


def write_json(path, obj):
    """Writes a reference file (one-space indent, UTF-8 kept, a final newline) and says so."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump(obj, f, indent=1, ensure_ascii=False)
        f.write("\n")
    print(f"wrote {path}")


def post(port, path, body):
    """POSTs `body` as JSON to `path` on the server at loopback `port`; the parsed answer."""
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=120) as r:
        return json.load(r)


def serve(bin_dir, model, port, args):
    """Starts BIN_DIR/llama-server on `model` at loopback `port` with `args` (two threads) and
    waits until /health answers; the process. Exits the script when it does not start."""
    env = dict(os.environ, LD_LIBRARY_PATH=bin_dir)
    p = subprocess.Popen(
        [os.path.join(bin_dir, "llama-server"), "-m", model, "--port", str(port), "-t", "2",
         *args],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    for _ in range(300):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1) as r:
                if r.status == 200:
                    return p
        except (urllib.error.URLError, ConnectionError):
            pass
        time.sleep(0.2)
    p.kill()
    sys.exit("llama-server did not start")
