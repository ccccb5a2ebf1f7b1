// The chat page against the real model: what only a real server can show (streaming, stopping
// and the slot being freed, the request the settings produce being accepted).
import { join } from "node:path";
import { check, watch, idle } from "./lib.mjs";

const lastAnswer = () => {
  const b = [...document.querySelectorAll(".msg.assistant .bubble")].pop();
  return b ? b.textContent : "";
};
// Waits until the last answer is longer than `n` characters (and there are `answers` answers).
const answerLonger = (page, n, answers = 1) => page.waitForFunction(([n, answers]) => {
  const all = document.querySelectorAll(".msg.assistant .bubble");
  return all.length >= answers && all[all.length - 1].textContent.trim().length > n;
}, [n, answers], { timeout: 60000 });

export async function live({ browser, base, outDir }) {
  // A phone-sized screen.
  const context = await browser.newContext({ viewport: { width: 390, height: 844 }, deviceScaleFactor: 2, isMobile: true, hasTouch: true });
  const page = await context.newPage();
  const seen = watch(page, base);
  await page.goto(base);
  await page.waitForFunction(() => document.getElementById("model-name").textContent.length > 0);
  check((await page.textContent("#model-name")).endsWith(".gguf"), "the page shows the model name");

  // The conversation list starts folded away on a phone and opens over the page.
  const sidebarShown = () => page.evaluate(() => { const r = document.getElementById("sidebar").getBoundingClientRect(); return r.right > 0 && getComputedStyle(document.getElementById("sidebar")).visibility === "visible"; });
  check(!(await sidebarShown()), "phone: the conversation list is folded away");
  check((await page.getAttribute("#menu-btn", "aria-expanded")) === "false", "phone: the menu button says the list is closed");

  // Shift+Enter is a new line, Enter sends.
  await page.focus("#input");
  await page.keyboard.type("Write a long story");
  await page.keyboard.press("Shift+Enter");
  await page.keyboard.type("about a dragon who learns to cook.");
  check((await page.inputValue("#input")) === "Write a long story\nabout a dragon who learns to cook.", "Shift+Enter adds a new line without sending");
  check(await page.locator(".msg").count() === 0, "nothing was sent yet");
  await page.keyboard.press("Enter");
  await page.waitForFunction(() => document.body.classList.contains("generating"));
  check((await page.inputValue("#input")) === "", "Enter sends and empties the box");
  check(await page.isVisible("#stop") && !(await page.isVisible("#send")), "the stop button replaces send while the answer streams");
  await answerLonger(page, 0);
  const first = (await page.evaluate(lastAnswer)).length;
  await answerLonger(page, first + 20);
  const later = (await page.evaluate(lastAnswer)).length;
  check(later > first, `text streams in (${first} then ${later} characters)`);
  check(/tokens/.test(await page.locator(".msg.assistant .stats").last().textContent()), "a live token count shows while streaming");
  check(await page.locator(".msg.assistant .bubble").last().getAttribute("aria-busy") === "true", "the answer is marked busy while it streams");
  await page.screenshot({ path: join(outDir, "chat-phone-streaming.png"), animations: "disabled" });

  await page.keyboard.press("Escape");
  await idle(page, 5000);
  const stats = await page.locator(".msg.assistant .stats").last().textContent();
  check(/\d+ tokens · [\d.]+ tokens\/s/.test(stats) && /stopped/.test(stats), `Escape stops the answer; stats: "${stats}"`);
  check(await page.isVisible("#send"), "the send button is back");
  check(await page.locator(".msg.assistant .bubble[aria-busy]").count() === 0, "and no longer busy");

  // The server frees the slot once the page stops reading.
  let busy = true;
  for (let i = 0; i < 50 && busy; i++) {
    const slots = await (await fetch(base + "slots")).json();
    busy = slots.some((s) => s.is_processing);
    if (busy) await new Promise((r) => setTimeout(r, 20));
  }
  check(!busy, "the slot is free within a second of stopping");

  // Conversations persist in localStorage.
  const answer = await page.evaluate(lastAnswer);
  await page.reload();
  await page.waitForSelector(".msg.assistant .bubble");
  check((await page.locator(".msg.user .bubble").first().textContent()).includes("dragon"), "the conversation survives a reload");
  check((await page.evaluate(lastAnswer)) === answer, "with the same answer");

  // The stop button (rather than Escape), on a second message in the same conversation.
  await page.fill("#input", "Now tell me another long story, about a knight.");
  await page.click("#send");
  await answerLonger(page, 10, 2);
  await page.click("#stop");
  await idle(page, 5000);
  check(/stopped/.test(await page.locator(".msg.assistant .stats").last().textContent()), "the stop button stops the answer");

  // The menu opens the list; picking "New chat" closes it and empties the view.
  await page.click("#menu-btn");
  await page.waitForTimeout(250);
  check(await sidebarShown(), "phone: the menu button opens the conversation list");
  await page.screenshot({ path: join(outDir, "chat-phone-menu.png"), animations: "disabled" });
  await page.click("#new-chat");
  await page.waitForTimeout(250);
  check(!(await sidebarShown()) && await page.isVisible("#empty"), "phone: new chat closes the list and starts empty");
  check(await page.evaluate(() => document.documentElement.scrollWidth <= window.innerWidth), "phone: nothing is wider than the screen");
  await page.click("#menu-btn");
  check((await page.locator("#conversations li button.open").count()) === 1, "the previous conversation is listed");
  await page.click("#conversations li button.open");
  check((await page.locator(".msg.user").count()) === 2, "and opens again from the list");
  await page.screenshot({ path: join(outDir, "chat-phone.png"), animations: "disabled" });
  seen.verify("phone");
  await context.close();

  // Desktop: every sampler setting reaches the request, and the server accepts it.
  const desk = await browser.newContext({ viewport: { width: 1280, height: 800 } });
  const dpage = await desk.newPage();
  const dseen = watch(dpage, base);
  await dpage.goto(base);
  await dpage.click("#settings-btn");
  check(await dpage.isVisible("#settings"), "the settings panel opens");
  await dpage.waitForFunction(() => document.getElementById("s-temperature").placeholder !== "");
  check((await dpage.getAttribute("#s-temperature", "placeholder")) === "0.8", "the server's default temperature shows as a placeholder");
  const values = { system: "You are a pirate.", temperature: "0.2", top_k: "5", top_p: "0.9", min_p: "0.1", repeat_penalty: "1.2", max_tokens: "8", seed: "42" };
  for (const [k, v] of Object.entries(values)) await dpage.fill("#s-" + k, v);
  await dpage.keyboard.press("Escape");
  check(!(await dpage.isVisible("#settings")), "Escape closes the settings panel");
  check(await dpage.evaluate(() => document.activeElement.id) === "settings-btn", "focus returns to the settings button");
  await dpage.fill("#input", "Hello!");
  const [request] = await Promise.all([dpage.waitForRequest((r) => r.url().endsWith("/v1/chat/completions")), dpage.press("#input", "Enter")]);
  const body = request.postDataJSON();
  check(body.stream === true && body.temperature === 0.2 && body.top_k === 5 && body.top_p === 0.9 && body.min_p === 0.1
    && body.repeat_penalty === 1.2 && body.max_tokens === 8 && body.seed === 42, "the sampler settings are sent: " + JSON.stringify(body).slice(0, 200));
  check(body.messages[0].role === "system" && body.messages[0].content === "You are a pirate." && body.messages[1].content === "Hello!", "with the system prompt first");
  await idle(dpage);
  const stats2 = await dpage.locator(".msg.assistant .stats").last().textContent();
  check(!(await dpage.locator(".msg.error").count()) && /^8 tokens · [\d.]+ tokens\/s · prompt \d+ tokens/.test(stats2) && /token limit/.test(stats2),
    `the server honours them (max_tokens 8): "${stats2}"`);
  await dpage.reload();
  await dpage.click("#settings-btn");
  const kept = await dpage.evaluate((ks) => ks.map((k) => document.getElementById("s-" + k).value), Object.keys(values));
  check(JSON.stringify(kept) === JSON.stringify(Object.values(values)), "the settings are kept across a reload");
  await dpage.click("#s-reset");
  check(await dpage.inputValue("#s-temperature") === "" && await dpage.evaluate(() => JSON.parse(localStorage.getItem("llamafile.settings.v2")).temperature) === "",
    "Reset to defaults clears them");
  await dpage.keyboard.press("Escape");
  dseen.verify("desktop, live");
  await desk.close();
}
