// The chat page in headless Chromium: load /, send a message, see the answer stream in, press
// stop, check the slot is freed, the conversation survives a reload, and Markdown is rendered
// (and escaped). Screenshots go to tests/out/. Usage: node chat.mjs LLAMAFILE_BINARY MODEL.gguf
import { chromium } from "playwright-core";
import { spawn } from "node:child_process";
import { mkdirSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { createInterface } from "node:readline";

const [binary, model] = process.argv.slice(2);
if (!binary || !model) throw new Error("usage: node chat.mjs LLAMAFILE_BINARY MODEL.gguf");
const outDir = join(dirname(fileURLToPath(import.meta.url)), "..", "out");
mkdirSync(outDir, { recursive: true });

function check(cond, what) {
  if (!cond) throw new Error("check failed: " + what);
  console.log("ok: " + what);
}

const env = { ...process.env };
delete env.DISPLAY;
delete env.WAYLAND_DISPLAY;
const server = spawn(binary, ["-m", model, "--server", "--nobrowser", "--port", "0", "-np", "2", "-c", "4096"],
  { stdio: ["ignore", "pipe", "inherit"], env });
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
let failed = false;
try {
  // A phone-sized screen.
  const context = await browser.newContext({ viewport: { width: 390, height: 844 }, deviceScaleFactor: 2, isMobile: true, hasTouch: true });
  const page = await context.newPage();
  const requests = [];
  page.on("request", (r) => requests.push(r.url()));
  const errors = [];
  page.on("pageerror", (e) => errors.push(String(e)));
  await page.goto(base);
  await page.waitForFunction(() => document.getElementById("model-name").textContent.length > 0);
  check((await page.textContent("#model-name")).endsWith(".gguf"), "the page shows the model name");

  await page.fill("#input", "Write a long story about a dragon who learns to cook.");
  await page.press("#input", "Enter");
  const bubble = page.locator(".msg.assistant .bubble").last();
  await page.waitForFunction(() => document.body.classList.contains("generating"));
  check(await page.isVisible("#stop"), "the stop button shows while the answer streams");
  await page.waitForFunction(() => {
    const b = [...document.querySelectorAll(".msg.assistant .bubble")].pop();
    return b && b.textContent.trim().length > 0;
  }, null, { timeout: 60000 });
  const first = (await bubble.textContent()).length;
  await page.waitForFunction((n) => {
    const b = [...document.querySelectorAll(".msg.assistant .bubble")].pop();
    return b.textContent.length > n + 20;
  }, first, { timeout: 60000 });
  const later = (await bubble.textContent()).length;
  check(later > first, `text streams in (${first} then ${later} characters)`);
  await page.screenshot({ path: join(outDir, "chat-phone-streaming.png") });

  await page.click("#stop");
  await page.waitForFunction(() => !document.body.classList.contains("generating"));
  const stats = await page.locator(".msg.assistant .stats").last().textContent();
  check(/tokens\/s/.test(stats) && /stopped/.test(stats), `stats after the answer: "${stats}"`);
  check(await page.isVisible("#send"), "the send button is back");

  // The server frees the slot once the page stops reading.
  let busy = true;
  for (let i = 0; i < 50 && busy; i++) {
    const slots = await (await fetch(base + "slots")).json();
    busy = slots.some((s) => s.is_processing);
    if (busy) await new Promise((r) => setTimeout(r, 20));
  }
  check(!busy, "the slot is free within a second of pressing stop");

  // Conversations persist in localStorage.
  const answer = await bubble.textContent();
  await page.reload();
  await page.waitForSelector(".msg.assistant .bubble");
  check((await page.locator(".msg.user .bubble").first().textContent()).includes("dragon"), "the conversation survives a reload");
  check((await page.locator(".msg.assistant .bubble").last().textContent()) === answer, "with the same answer");

  // Markdown: code blocks, inline formatting, and no HTML injection.
  const html = await page.evaluate(() => markdown("# T\n**b** and `x<y`\n\n```js\nif (a < b) {}\n```\n- one\n- two\n<img src=x onerror=alert(1)>"));
  check(html.includes("<pre>") && html.includes("if (a &lt; b) {}"), "fenced code becomes an escaped code block");
  check(html.includes("<strong>b</strong>") && html.includes("<code>x&lt;y</code>") && html.includes("<li>two</li>"), "inline Markdown and lists");
  check(!html.includes("<img"), "raw HTML is escaped");

  // New chat empties the view; the old one stays in the list.
  await page.click("#menu-btn");
  await page.click("#new-chat");
  check(await page.isVisible("#empty"), "new chat starts empty");
  check((await page.locator("#conversations li").count()) === 1, "the previous conversation is listed");
  await page.screenshot({ path: join(outDir, "chat-phone-new.png") });

  // A desktop-sized screen with the settings open.
  await page.setViewportSize({ width: 1200, height: 800 });
  await page.click("#conversations li button.open");
  await page.click("#settings-btn");
  await page.fill("#system", "You are a pirate.");
  await page.fill("#temperature", "0.2");
  await page.fill("#max-tokens", "8");
  await page.fill("#input", "Hello!");
  await page.click("#send");
  await page.waitForFunction(() => !document.body.classList.contains("generating"), null, { timeout: 60000 });
  const stats2 = await page.locator(".msg.assistant .stats").last().textContent();
  check(/^\d+ tokens/.test(stats2), `second answer done: "${stats2}"`);
  const saved = await page.evaluate(() => JSON.parse(localStorage.getItem("llamafile.settings.v1")));
  check(saved.system === "You are a pirate." && saved.maxTokens === "8", "settings are kept in localStorage");
  await page.screenshot({ path: join(outDir, "chat-desktop.png") });

  check(requests.every((u) => u.startsWith(base)), "the page loads nothing from other hosts");
  check(errors.length === 0, "no script errors" + (errors.length ? ": " + errors.join("; ") : ""));
} catch (e) {
  failed = true;
  console.error(e);
} finally {
  await browser.close();
  server.kill();
}
process.exit(failed ? 1 : 0);
