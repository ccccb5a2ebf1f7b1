#!/usr/bin/env python3
"""Regenerates llama.cpp's image embeddings of the synthetic SigLIP projectors for
tests/vision_siglip.rs, of the Pixtral ones for tests/vision_pixtral.rs, of the Qwen2-VL, Qwen2.5-VL
and Llama 4 ones for tests/vision_qwen2vl.rs, vision_qwen25vl.rs and vision_llama4.rs, of the
MiniCPM-V ones for tests/vision_minicpmv.rs, and llama-mtmd-cli's greedy text after images on
the synthetic Gemma 3, SmolVLM, Pixtral, Qwen2-VL, Qwen2.5-VL, Llama 4 and MiniCPM-V pairs for tests/vision_llama_cpp.rs (tests/data/vision/README.md
describes the files).

    tools/make-vision-refs.py [--bin DIR] [--out DIR] [--vocab-from SMOLLM2.gguf] [--only FAMILY...]

--only remakes the named families' files and greedy cases, keeping the others' as they are.

For each projector (`tools/synth-model.py --mmproj gemma3|smolvlm|pixtral|mistral3|qwen2vl|qwen25vl|llama4|minicpmv f16|q8_0`)
and test picture (the tests' `picture(W, H)`, as a PNG), runs `llama-mtmd-cli` (from --bin, default
~/.cache/llama-cpp-ref/bin) with the family's synthetic text model, 2 threads, flash attention
off, and its `MTMD_DEBUG_EMBEDDINGS` hook pointed at a pipe: the hook writes
`[int32 n_tokens][int32 n_embd][f32 rows]` each time the projector encodes an input, so an
image cut into tiles gives one record per tile and one for the overview, in encoding order.
The records go to `FAMILY-TYPE-WxH.emb`; the SHA-256 of each synthetic file to index.json.

Then, for each case of GREEDY, `llama-mtmd-cli -m TEXT --mmproj MMPROJ(q8_0) --image PIC... -p
PROMPT -n 12 --temp 0 -t 2 -fa off --chat-template TEMPLATE`, its stdout without the leading and
trailing newlines, into greedy.json.
"""

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import threading

import numpy as np
from PIL import Image

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SYNTH = os.path.join(ROOT, "tools", "synth-model.py")

# family -> pictures (W, H)
CASES = {
    "gemma3": [(130, 50), (224, 224)],
    "smolvlm": [(130, 50), (90, 170)],
    "pixtral": [(130, 50), (90, 170)],
    "mistral3": [(130, 50), (90, 170)],
    "qwen2vl": [(130, 50), (90, 170)],
    # 250×180 → 252×168: 9×6 tokens, in 112-pixel windows of 4×4 tokens: 3×2 windows, those at
    # the right and bottom edges cut short.
    "qwen25vl": [(130, 50), (250, 180)],
    # 112-pixel tiles: 84×84 is the overview alone, 130×50 2×1 tiles and 250×180 3×2, each then
    # the overview.
    "llama4": [(84, 84), (130, 50), (250, 180)],
    # MiniCPM-V, 112-pixel inputs: 84×84 is the overview alone (stretched to 112×112); 130×50
    # the overview (126×56) and 2×1 slices of 126×98; 250×180 the overview (126×98) and 2×2.
    "minicpmv": [(84, 84), (130, 50), (250, 180)],
    # MiniCPM-V 2.5's layout (version 2): one sliced picture.
    "minicpmv25": [(250, 180)],
}


def picture(w, h):
    """tests/common/picture.rs's picture."""
    y, x = np.mgrid[0:h, 0:w]
    img = np.zeros((h, w, 3), dtype=np.uint8)
    img[..., 0] = x * 255 // (w - 1)
    img[..., 1] = y * 255 // (h - 1)
    img[..., 2] = np.where((x // 9 + y // 7) % 2 == 0, 230, 20)
    return img


# family, chat template, prompt, pictures (W, H), one per image: llama-mtmd-cli's greedy text
# after them. The Q8_0 projectors: with f16 ones, llama.cpp's f16 activations and ours round
# apart at the third token of one SmolVLM case (the synthetic models amplify any difference).
GREEDY = [
    ("gemma3", "gemma", "Describe.", [(224, 224)]),
    ("gemma3", "gemma", "Look: <__media__> What is it?", [(130, 50)]),
    ("gemma3", "gemma", "Compare them.", [(224, 224), (130, 50)]),
    ("smolvlm", "chatml", "Describe.", [(130, 50)]),
    ("smolvlm", "chatml", "Describe.", [(90, 170)]),
    ("smolvlm", "chatml", "Look: <__media__> What is it?", [(84, 84)]),
    ("pixtral", "mistral-v7", "Describe.", [(130, 50)]),
    ("pixtral", "mistral-v7", "Look: <__media__> What is it?", [(90, 170)]),
    ("mistral3", "mistral-v7", "Describe.", [(90, 170)]),
    ("mistral3", "mistral-v7", "Compare them.", [(130, 50), (90, 170)]),
    # Qwen2-VL: "Compare them." after these two pictures is a near tie at its ninth token
    # (llama.cpp's f16 and Q8_0 projectors choose apart), so the two-image case names both places.
    ("qwen2vl", "chatml", "Describe.", [(130, 50)]),
    ("qwen2vl", "chatml", "Look: <__media__> What is it?", [(90, 170)]),
    ("qwen2vl", "chatml", "Compare them: <__media__> and <__media__>.", [(130, 50), (90, 170)]),
    # Qwen2.5-VL: "Describe." after the 250×180 picture is a near tie at its seventh token
    # (llama.cpp's f16 and Q8_0 projectors choose apart), so not a case.
    ("qwen25vl", "chatml", "What is it?", [(250, 180)]),
    ("qwen25vl", "chatml", "Look: <__media__> What is it?", [(130, 50)]),
    ("qwen25vl", "chatml", "Compare them.", [(180, 250), (130, 50)]),
    # Llama 4: "Describe." after the 250×180 picture prints half of a UTF-8 character, so
    # not a case.
    ("llama4", "llama4", "What do you see?", [(250, 180)]),
    ("llama4", "llama4", "Look: <__media__> What is it?", [(130, 50)]),
    ("llama4", "llama4", "Compare them.", [(84, 84), (130, 50)]),
    ("minicpmv", "chatml", "Describe.", [(250, 180)]),
    ("minicpmv", "chatml", "Look: <__media__> What is it?", [(130, 50)]),
    # MiniCPM-V: "Compare them." after the 84×84 and 250×180 pictures prints half of a UTF-8
    # character, so not a case.
    ("minicpmv", "chatml", "Compare them.", [(84, 84), (130, 50)]),
    ("minicpmv25", "llama3", "Describe.", [(250, 180)]),
    # MiniCPM-V 2.5: "Look: <__media__> What is it?" after the 130×50 picture is a near tie at
    # its ninth token (llama.cpp's f16 and Q8_0 projectors choose apart), and "What is it?"
    # prints half of a UTF-8 character, so neither is a case.
    ("minicpmv25", "llama3", "Compare them.", [(84, 84), (130, 50)]),
]


def run_greedy(binary, text, mmproj, pngs, prompt, template):
    """llama-mtmd-cli's greedy text, as printed without its leading and trailing newlines."""
    cmd = [binary, "-m", text, "--mmproj", mmproj]
    for png in pngs:
        cmd += ["--image", png]
    cmd += ["-p", prompt, "-n", "12", "--temp", "0", "-t", "2", "-fa", "off",
            "--chat-template", template]
    env = dict(os.environ, LD_LIBRARY_PATH=os.path.dirname(binary))
    # Bytes, decoded here: text mode would turn a printed "\r\n" into "\n".
    proc = subprocess.run(cmd, env=env, capture_output=True)
    if proc.returncode != 0:
        err = proc.stderr.decode("utf-8", "replace")
        sys.exit(f"make-vision-refs: {' '.join(cmd)} failed:\n{err[-2000:]}")
    return proc.stdout.decode("utf-8").strip("\n")


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def run_mtmd(binary, text, mmproj, png):
    """The embedding records llama-mtmd-cli's hook writes for one image, as bytes."""
    r, w = os.pipe()
    chunks = []
    reader = threading.Thread(target=lambda: chunks.append(os.fdopen(r, "rb").read()))
    reader.start()
    env = dict(os.environ, MTMD_DEBUG_EMBEDDINGS=f"/dev/fd/{w}",
               LD_LIBRARY_PATH=os.path.dirname(binary))
    cmd = [binary, "-m", text, "--mmproj", mmproj, "--image", png, "-p", "Describe.",
           "-n", "1", "--temp", "0", "-t", "2", "-fa", "off"]
    proc = subprocess.run(cmd, env=env, pass_fds=(w,), capture_output=True, text=True)
    os.close(w)
    reader.join()
    if proc.returncode != 0:
        sys.exit(f"make-vision-refs: {' '.join(cmd)} failed:\n{proc.stderr[-2000:]}")
    return chunks[0]


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default=os.path.expanduser("~/.cache/llama-cpp-ref/bin"))
    ap.add_argument("--out", default=os.path.join(ROOT, "tests", "data", "vision"))
    ap.add_argument("--vocab-from", default=None)
    ap.add_argument("--only", nargs="+", choices=sorted(CASES), default=sorted(CASES),
                    help="the families to remake (default: all)")
    a = ap.parse_args()
    binary = os.path.join(a.bin, "llama-mtmd-cli")
    index_path = os.path.join(a.out, "index.json")
    with open(index_path) as f:
        index = json.load(f)
    vocab = ["--vocab-from", a.vocab_from] if a.vocab_from else []
    with tempfile.TemporaryDirectory() as tmp:
        for family, pics in CASES.items():
            if family not in a.only:
                continue
            text = os.path.join(tmp, f"text-{family}.gguf")
            subprocess.run([sys.executable, SYNTH, family, "f16", text] + vocab, check=True)
            index.setdefault("text_sha256", {})[family] = sha256(text)
            for ty in ("f16", "q8_0"):
                mmproj = os.path.join(tmp, f"mmproj-{family}-{ty}.gguf")
                subprocess.run([sys.executable, SYNTH, "--mmproj", family, ty, mmproj],
                               check=True)
                index.setdefault("siglip_mmproj_sha256", {})[f"{family}-{ty}"] = sha256(mmproj)
                for w, h in pics:
                    png = os.path.join(tmp, f"{w}x{h}.png")
                    Image.fromarray(picture(w, h)).save(png)
                    data = run_mtmd(binary, text, mmproj, png)
                    out = os.path.join(a.out, f"{family}-{ty}-{w}x{h}.emb")
                    with open(out, "wb") as f:
                        f.write(data)
                    print(f"{out}: {len(data)} bytes")
        greedy_path = os.path.join(a.out, "greedy.json")
        kept = {}
        if os.path.exists(greedy_path):
            with open(greedy_path) as f:
                for c in json.load(f)["cases"]:
                    kept[(c["family"], c["prompt"], tuple(c["pictures"]))] = c
        cases = []
        for family, template, prompt, pics in GREEDY:
            key = (family, prompt, tuple(f"{w}x{h}" for w, h in pics))
            if family not in a.only:
                if key not in kept:
                    sys.exit(f"make-vision-refs: greedy.json lacks {key}; remake {family}")
                cases.append(kept[key])
                continue
            pngs = []
            for w, h in pics:
                png = os.path.join(tmp, f"{w}x{h}.png")
                Image.fromarray(picture(w, h)).save(png)
                pngs.append(png)
            text = os.path.join(tmp, f"text-{family}.gguf")
            mmproj = os.path.join(tmp, f"mmproj-{family}-q8_0.gguf")
            out = run_greedy(binary, text, mmproj, pngs, prompt, template)
            cases.append({"family": family, "template": template, "prompt": prompt,
                          "pictures": [f"{w}x{h}" for w, h in pics], "text": out})
            print(f"{family} {prompt!r} {pics}: {out!r}")
        doc = {
            "about": "llama-mtmd-cli -m TEXT --mmproj MMPROJ --image PICTURE... -p PROMPT -n 12 "
                     "--temp 0 -t 2 -fa off --chat-template TEMPLATE; TEXT: tools/synth-model.py "
                     "FAMILY f16 (text_sha256 in index.json), MMPROJ: --mmproj FAMILY q8_0 "
                     "(siglip_mmproj_sha256); PICTURE: the test picture of that size; text: "
                     "stdout without its leading and trailing newlines "
                     "(tools/make-vision-refs.py)",
            "cases": cases,
        }
        with open(greedy_path, "w") as f:
            json.dump(doc, f, indent=2, ensure_ascii=False)
            f.write("\n")
    with open(index_path, "w") as f:
        json.dump(index, f, indent=2)
        f.write("\n")


if __name__ == "__main__":
    main()
