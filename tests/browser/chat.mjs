// The chat page in headless Chromium (playwright-core): starts the server on a free port, then
// runs two suites, each in its own browser context:
//   live.mjs   against the real model: send, stream, stop (button and Escape), the slot freed,
//              a reload keeping the conversation, settings reaching the request, phone layout;
//   canned.mjs with /v1/chat/completions answered by canned SSE streams (page.route), so the
//              checks do not depend on what the model says: Markdown (tables, code, links)
//              rendered and HTML escaped, copy buttons, edit/regenerate and branch switching,
//              export/import, attachments, dark mode, keyboard and labels, tokens/s from timings.
// Screenshots (desktop 1280x800 and phone 390x844) go to tests/out/.
// Usage: node chat.mjs LLAMAFILE_BINARY MODEL.gguf
import { chromium } from "playwright-core";
import { spawn } from "node:child_process";
import { mkdirSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { createInterface } from "node:readline";
import { live } from "./live.mjs";
import { canned } from "./canned.mjs";

const [binary, model] = process.argv.slice(2);
if (!binary || !model) throw new Error("usage: node chat.mjs LLAMAFILE_BINARY MODEL.gguf");
const outDir = join(dirname(fileURLToPath(import.meta.url)), "..", "out");
mkdirSync(outDir, { recursive: true });

const env = { ...process.env };
delete env.DISPLAY;
delete env.WAYLAND_DISPLAY;
const server = spawn(binary, ["-m", model, "--server", "--nobrowser", "--port", "0", "-np", "2", "-c", "4096"],
  { stdio: ["ignore", "pipe", "inherit"], env });
// The server goes when this script goes, however it ends (a failed check, Ctrl-C, a closed pipe).
process.on("exit", () => server.kill());
for (const sig of ["SIGINT", "SIGTERM", "SIGHUP"]) process.on(sig, () => process.exit(1));
const base = await new Promise((resolve, reject) => {
  const rl = createInterface({ input: server.stdout });
  rl.once("line", (line) => {
    const m = line.match(/http:\/\/127\.0\.0\.1:\d+\//);
    m ? resolve(m[0]) : reject(new Error("no URL in " + line));
  });
  server.once("exit", (code) => reject(new Error("server exited with " + code)));
});

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync"],
});
const started = Date.now();
let failed = false;
try {
  await live({ browser, base, outDir });
  await canned({ browser, base, outDir });
  console.log(`browser checks passed in ${((Date.now() - started) / 1000).toFixed(1)} s`);
} catch (e) {
  failed = true;
  console.error(e);
} finally {
  await browser.close();
  server.kill();
}
process.exit(failed ? 1 : 0);
