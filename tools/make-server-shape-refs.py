#!/usr/bin/env python3
"""Records the shapes of llama-server's answers (which fields each carries) for the server
tests that check a client finds every field it reads: /props, /slots, /completion's
`generation_settings`, `__verbose` on the OpenAI endpoints, `tokens_cached`, and what an empty
`messages` list renders to. Writes tests/data/server/shapes-smollm2.json, and
tests/data/server/chat-template-caps.json: /props `chat_template_caps` for each model in CAPS_MODELS
and for each template of llama.cpp's models/templates/ (SmolLM2 with --chat-template-file).

Usage: tools/make-server-shape-refs.py [LLAMA_CPP_BIN_DIR] (default ~/.cache/llama-cpp-ref/bin,
llama.cpp 0c1e570). The model comes from packaging/fetch-models.sh.
"""

import glob
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import llama_server_ref  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = sys.argv[1] if len(sys.argv) > 1 else os.path.expanduser("~/.cache/llama-cpp-ref/bin")
MODELS = os.environ.get("LLAMAFILE_MODELS", os.path.expanduser("~/.cache/llamafile-rs/models"))
OUT = os.path.join(ROOT, "tests/data/server/shapes-smollm2.json")
CAPS_OUT = os.path.join(ROOT, "tests/data/server/chat-template-caps.json")
CAPS_MODELS = ["SmolLM2-135M-Instruct.Q4_1.gguf", "qwen2.5-coder-0.5b-instruct.gguf",
               "gemma-3-270m-q4_k_m.gguf"]
TEMPLATES = os.path.join(os.path.dirname(BIN), "src/llama_cpp_python-0.3.36/vendor/llama.cpp/models/templates")
PORT = 18979


def get(path):
    import urllib.request
    with urllib.request.urlopen(f"http://127.0.0.1:{PORT}{path}", timeout=60) as r:
        return json.load(r)


def caps_of(model, args):
    p = llama_server_ref.serve(BIN, model, PORT, ["-c", "512", "-np", "1", *args])
    try:
        return get("/props")["chat_template_caps"]
    finally:
        p.kill()
        p.wait()


def record_caps():
    """llama-server works the capabilities out from the template (llama.cpp's jinja/caps.cpp)."""
    models = {name: caps_of(os.path.join(MODELS, name), []) for name in CAPS_MODELS}
    templates = {}
    for path in sorted(glob.glob(os.path.join(TEMPLATES, "*.jinja"))):
        smol = os.path.join(MODELS, CAPS_MODELS[0])
        templates[os.path.basename(path)] = caps_of(smol, ["--chat-template-file", path])
    with open(CAPS_OUT, "w") as f:
        json.dump({"models": models, "templates": templates}, f, indent=1, sort_keys=True)
        f.write("\n")
    print("wrote", CAPS_OUT)


def main():
    model = os.path.join(MODELS, "SmolLM2-135M-Instruct.Q4_1.gguf")
    p = llama_server_ref.serve(BIN, model, PORT, ["-c", "1024", "-np", "1"])
    try:
        post = lambda path, body: llama_server_ref.post(PORT, path, body)  # noqa: E731
        props = get("/props")
        done = post("/completion", {"prompt": "The capital of France is", "n_predict": 4,
                                    "temperature": 0, "ignore_eos": True})
        slot = get("/slots")[0]
        chat = post("/v1/chat/completions", {
            "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2, "verbose": True})
        empty = post("/v1/chat/completions", {"messages": [], "max_tokens": 1})
        empty_prompt = post("/apply-template", {"messages": []})["prompt"]
    finally:
        p.kill()
    out = {
        "props": list(props),
        "props_params": list(props["default_generation_settings"]["params"]),
        "modalities": props["modalities"],
        "chat_template_caps": props["chat_template_caps"],
        "completion": list(done),
        "generation_settings": list(done["generation_settings"]),
        "tokens_cached": done["tokens_cached"],
        "tokens_evaluated": done["tokens_evaluated"],
        "tokens_predicted": done["tokens_predicted"],
        "slot": list(slot),
        "slot_params": list(slot["params"]),
        "slot_n_prompt_tokens": slot["n_prompt_tokens"],
        "chat_verbose": list(chat["__verbose"]),
        "empty_messages": {"object": empty["object"], "prompt": empty_prompt},
    }
    with open(OUT, "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")
    print("wrote", OUT)


if __name__ == "__main__":
    main()
    record_caps()
