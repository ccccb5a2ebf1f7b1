#!/usr/bin/env python3
"""Compiles every gpu-src/*.cu to PTX for compute_75 with NVRTC, writing gpu-src/ptx/NAME.ptx.

The PTX is committed and embedded in the binary (src/gpu/kernels.rs); the driver JIT-compiles it
for whatever GPU it finds, so users need no CUDA toolkit. NVRTC comes from the Python package
registry (pip install nvidia-cuda-nvrtc-cu12==12.0.140) and is called through ctypes, so no
system CUDA is needed here either. The version is pinned: NVRTC 12.0 writes PTX ISA 8.0, which
drivers from 525 on can load (a newer NVRTC writes a newer ISA that older drivers refuse), and one
version gives byte-identical output, which --check relies on.

  tools/build-ptx.py            rebuild gpu-src/ptx/
  tools/build-ptx.py --check    rebuild in memory; fail if a source does not compile or the
                                committed PTX differs from what the sources give
  --nvrtc PATH                  a libnvrtc.so to use instead of the pip package's

Exit status: 0 done; 1 a compile error or (with --check) stale PTX; 2 NVRTC cannot be found or
is not the pinned version (the message says how to install it; .ci/run treats 2 as "skipped").
"""

import argparse
import ctypes
import glob
import os
import sys

ARCH = "compute_75"
PINNED = (12, 0)
PIP_PACKAGE = "nvidia-cuda-nvrtc-cu12==12.0.140"
# Every kernel is compiled with exactly these options; src/gpu/recompile.rs adds only its own
# --gpu-architecture. -lineinfo and -G are left out: they would embed paths.
OPTIONS = [f"--gpu-architecture={ARCH}", "--std=c++17", "--fmad=true"]

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SRC = os.path.join(ROOT, "gpu-src")
OUT = os.path.join(SRC, "ptx")


class Unavailable(Exception):
    """NVRTC is missing or not the pinned version."""


def find_nvrtc(explicit):
    if explicit:
        return explicit
    try:
        import nvidia.cuda_nvrtc as pkg  # the pip package's namespace
    except ImportError:
        raise Unavailable(f"NVRTC not installed: pip install {PIP_PACKAGE}")
    for base in pkg.__path__:
        hits = sorted(glob.glob(os.path.join(base, "lib", "libnvrtc.so*")))
        hits = [h for h in hits if "builtins" not in h and ".alt." not in h]
        if hits:
            return hits[0]
    raise Unavailable(f"the nvidia.cuda_nvrtc package has no libnvrtc.so: pip install {PIP_PACKAGE}")


class Nvrtc:
    def __init__(self, path):
        try:
            self.lib = ctypes.CDLL(path)
        except OSError as e:
            raise Unavailable(f"cannot load {path}: {e}")
        major, minor = ctypes.c_int(), ctypes.c_int()
        self.check(self.lib.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor)), "nvrtcVersion")
        self.version = (major.value, minor.value)
        if self.version != PINNED:
            raise Unavailable(
                f"NVRTC {major.value}.{minor.value} found at {path}, but the committed PTX is built "
                f"with {PINNED[0]}.{PINNED[1]}: pip install {PIP_PACKAGE}"
            )
        self.lib.nvrtcGetErrorString.restype = ctypes.c_char_p

    def check(self, status, what):
        if status != 0:
            msg = self.lib.nvrtcGetErrorString(status).decode() if hasattr(self, "version") else status
            raise RuntimeError(f"{what}: {msg}")

    def compile(self, name, source, headers):
        prog = ctypes.c_void_p()
        names = list(headers)
        n = len(names)
        hdr_src = (ctypes.c_char_p * n)(*[headers[h].encode() for h in names])
        hdr_names = (ctypes.c_char_p * n)(*[h.encode() for h in names])
        self.check(
            self.lib.nvrtcCreateProgram(
                ctypes.byref(prog), source.encode(), name.encode(), n, hdr_src, hdr_names
            ),
            f"{name}: nvrtcCreateProgram",
        )
        try:
            opts = (ctypes.c_char_p * len(OPTIONS))(*[o.encode() for o in OPTIONS])
            status = self.lib.nvrtcCompileProgram(prog, len(OPTIONS), opts)
            size = ctypes.c_size_t()
            self.lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
            log = ctypes.create_string_buffer(size.value)
            self.lib.nvrtcGetProgramLog(prog, log)
            if status != 0:
                raise RuntimeError(f"{name} does not compile:\n{log.value.decode().strip()}")
            self.lib.nvrtcGetPTXSize(prog, ctypes.byref(size))
            ptx = ctypes.create_string_buffer(size.value)
            self.check(self.lib.nvrtcGetPTX(prog, ptx), f"{name}: nvrtcGetPTX")
            return ptx.value.decode()
        finally:
            self.lib.nvrtcDestroyProgram(ctypes.byref(prog))


def sources():
    cus = sorted(glob.glob(os.path.join(SRC, "*.cu")))
    headers = {}
    for h in sorted(glob.glob(os.path.join(SRC, "*.cuh"))):
        with open(h, encoding="utf-8") as f:
            headers[os.path.basename(h)] = f.read()
    return cus, headers


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="fail if the committed PTX is stale")
    ap.add_argument("--nvrtc", help="path of libnvrtc.so (default: the pip package's)")
    args = ap.parse_args()
    try:
        nvrtc = Nvrtc(find_nvrtc(args.nvrtc))
    except Unavailable as e:
        print(f"build-ptx: {e}", file=sys.stderr)
        return 2
    cus, headers = sources()
    if not cus:
        print(f"build-ptx: no .cu files in {SRC}", file=sys.stderr)
        return 1
    failed, stale = [], []
    wanted = set()
    for cu in cus:
        name = os.path.basename(cu)
        with open(cu, encoding="utf-8") as f:
            source = f.read()
        try:
            ptx = nvrtc.compile(name, source, headers)
        except RuntimeError as e:
            print(f"build-ptx: {e}", file=sys.stderr)
            failed.append(name)
            continue
        target = os.path.join(OUT, name[:-3] + ".ptx")
        wanted.add(os.path.basename(target))
        if args.check:
            try:
                with open(target, encoding="utf-8") as f:
                    if f.read() != ptx:
                        stale.append(os.path.relpath(target, ROOT))
            except FileNotFoundError:
                stale.append(os.path.relpath(target, ROOT) + " (missing)")
        else:
            os.makedirs(OUT, exist_ok=True)
            tmp = target + ".tmp"
            with open(tmp, "w", encoding="utf-8", newline="\n") as f:
                f.write(ptx)
            os.replace(tmp, target)
    extra = sorted(
        p for p in os.listdir(OUT) if p.endswith(".ptx") and p not in wanted
    ) if os.path.isdir(OUT) and not failed else []
    if args.check and extra:
        stale += [f"gpu-src/ptx/{p} (no source)" for p in extra]
    elif extra:
        for p in extra:
            os.remove(os.path.join(OUT, p))
    if failed:
        print(f"build-ptx: {len(failed)} of {len(cus)} sources failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    if stale:
        print("build-ptx: committed PTX differs from the sources (run tools/build-ptx.py):", file=sys.stderr)
        for s in stale:
            print(f"  {s}", file=sys.stderr)
        return 1
    verb = "checked" if args.check else "built"
    print(f"build-ptx: {verb} {len(cus)} kernel sources with NVRTC {nvrtc.version[0]}.{nvrtc.version[1]} for {ARCH}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
