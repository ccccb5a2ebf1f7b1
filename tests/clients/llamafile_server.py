"""Starts `llamafile --server` for the client scripts in tests/clients/: on a free loopback port
(--port 0), ready once it prints its URL on stdout (it does so after the model is loaded and the
port is listening)."""

import os
import re
import subprocess
import sys


def start(binary, model, *extra, slots=2, ctx=2048):
    """The server process and its OpenAI base URL (`http://127.0.0.1:PORT/v1`)."""
    proc = subprocess.Popen(
        [binary, "-m", model, "--server", "--nobrowser", "--port", "0", "-np", str(slots),
         "-c", str(ctx), *extra],
        stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
        env={k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY")},
    )
    line = proc.stdout.readline()
    m = re.search(r"http://127\.0\.0\.1:(\d+)/", line)
    if not m:
        proc.kill()
        proc.wait()
        sys.exit(f"the server did not print its URL: {line!r}")
    return proc, f"http://127.0.0.1:{m.group(1)}/v1"


def stop(proc):
    proc.kill()
    proc.wait()
