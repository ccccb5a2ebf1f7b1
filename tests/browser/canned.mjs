// The chat page with /v1/chat/completions answered by canned SSE streams: rendering, branching,
// export/import, attachments, theme and keyboard checks that must not depend on the model.
import { join } from "node:path";
import { readFileSync } from "node:fs";
import { check, watch, idle, unlabelled } from "./lib.mjs";

// Markdown with the pieces a reply may have, plus HTML that must stay text.
const MARKDOWN_REPLY = [
  "## Results\n\nHere is **bold**, *emphasis*, `inline <code>` and a [link](https://example.com/docs).\n\n",
  "| Name | Score |\n|:-----|------:|\n| alpha | 1 |\n| <b>beta</b> | 22 |\n\n",
  "1. first\n2. second\n   - nested\n\n",
  "```python\ndef greet(name):\n    return \"hi \" + name  # say hi\n```\n\n",
  "Payload: <img src=x onerror=\"window.__xss=1\"> and <script>window.__xss=2</script> ",
  "and [click](javascript:window.__xss=3) <a href=\"javascript:window.__xss=4\">a</a>",
];
const CODE = 'def greet(name):\n    return "hi " + name  # say hi';

function sse(text, { finish = "stop", timings } = {}) {
  const head = { id: "chatcmpl-test", object: "chat.completion.chunk", created: 0, model: "canned" };
  const event = (delta, finish_reason = null, extra = {}) => `data: ${JSON.stringify({ ...head, choices: [{ index: 0, delta, finish_reason }], ...extra })}\n\n`;
  const pieces = Array.isArray(text) ? text : text.match(/[\s\S]{1,7}/g);
  return event({ role: "assistant", content: "" }) + pieces.map((p) => event({ content: p })).join("")
    + event({}, finish, { timings: timings || { prompt_n: 12, prompt_per_second: 500, predicted_n: pieces.length, predicted_per_second: 123.4 } })
    + "data: [DONE]\n\n";
}

export async function canned({ browser, base, outDir }) {
  const context = await browser.newContext({ viewport: { width: 1280, height: 800 }, colorScheme: "light", acceptDownloads: true });
  await context.grantPermissions(["clipboard-read", "clipboard-write"], { origin: base.replace(/\/$/, "") });
  const page = await context.newPage();
  const seen = watch(page, base);
  const replies = [], requests = [];
  let hold = null; // while set, answers wait for it
  await page.route("**/v1/chat/completions", async (route) => {
    requests.push(route.request().postDataJSON());
    const body = sse(replies.shift() || "(no canned reply)");
    if (hold) await hold;
    await route.fulfill({ status: 200, headers: { "content-type": "text/event-stream" }, body }).catch(() => {}); // the page may have stopped it
  });
  const send = async (text, reply) => {
    replies.push(reply);
    await page.fill("#input", text);
    await page.press("#input", "Enter");
    await page.waitForFunction((n) => document.querySelectorAll("#thread .msg").length >= n, 2);
    await idle(page, 10000);
  };
  await page.goto(base);

  // What the previous page saved (a flat list of messages, its settings) is read on first load.
  await page.evaluate(() => {
    localStorage.setItem("llamafile.conversations.v1", JSON.stringify([{ id: "old", title: "Old chat", created: 1,
      messages: [{ role: "user", content: "old question" }, { role: "assistant", content: "old **answer**", stats: "3 tokens" }] }]));
    localStorage.setItem("llamafile.settings.v1", JSON.stringify({ system: "Be brief.", temperature: "0.3", maxTokens: "9", apiKey: "" }));
  });
  await page.reload();
  check(await page.locator("#conversations li button.open").textContent() === "Old chat" && await page.locator(".msg.assistant .bubble strong").textContent() === "answer",
    "conversations saved by the previous page are read");
  check(await page.inputValue("#s-system") === "Be brief." && await page.inputValue("#s-max_tokens") === "9", "and its settings");
  await page.evaluate(() => localStorage.clear());
  await page.reload();

  // Markdown rendered, HTML shown as text.
  await send("Show me everything", MARKDOWN_REPLY);
  const reply = page.locator(".msg.assistant .bubble").last();
  check(await reply.locator("h2").textContent() === "Results", "a heading");
  check(await reply.locator("strong").first().textContent() === "bold" && await reply.locator("em").first().textContent() === "emphasis", "bold and emphasis");
  check(await reply.locator("p code").first().textContent() === "inline <code>", "inline code, escaped");
  const link = reply.locator('a[href="https://example.com/docs"]');
  check(await link.count() === 1 && await link.getAttribute("rel") === "noopener noreferrer" && await link.getAttribute("target") === "_blank", "a link opening in a new tab");
  check(await reply.locator("table thead th").allTextContents().then((t) => t.join(",")) === "Name,Score", "a table header");
  check(await reply.locator("table tbody tr").count() === 2 && await reply.locator("table tbody tr:nth-child(2) td").first().textContent() === "<b>beta</b>", "table rows, HTML in a cell as text");
  check(await reply.locator("table tbody td.al-r").first().textContent() === "1", "column alignment");
  check(await reply.locator("ol > li").count() === 2 && await reply.locator("ol > li ul > li").textContent() === "nested", "an ordered list with a nested list");
  check(await reply.locator(".code pre code").textContent() === CODE, "a fenced code block, text intact");
  check(await reply.locator(".code .bar span").textContent() === "python", "labelled with its language");
  check(await reply.locator(".code .t-k").first().textContent() === "def" && await reply.locator(".code .t-s").count() === 1 && await reply.locator(".code .t-c").textContent() === "# say hi",
    "syntax highlighting: keyword, string, comment");
  const injected = await page.evaluate(() => ({
    elements: document.querySelectorAll("#thread img, #thread script, #thread iframe, #thread b, #thread a[href^='javascript']").length,
    xss: window.__xss,
  }));
  await page.waitForTimeout(100);
  check(injected.elements === 0 && injected.xss === undefined && seen.dialogs.length === 0, "the HTML payload creates no element and runs no script");
  const text = await reply.textContent();
  check(text.includes('<img src=x onerror="window.__xss=1">') && text.includes("<script>window.__xss=2</script>"), "the HTML payload shows as text");
  const stats = await page.locator(".msg.assistant .stats").last().textContent();
  check(stats.includes("123.4 tokens/s") && stats.includes("prompt 12 tokens"), `tokens/s from the server's timings: "${stats}"`);
  await page.screenshot({ path: join(outDir, "chat-desktop-markdown.png"), animations: "disabled" });

  // Cases a canned stream does not show: a code block still streaming, links that must not
  // become links, reasoning, and Markdown's own escapes.
  const md = (src) => page.evaluate((s) => markdown(s), src);
  check(await md("```js\nlet a = 1;\n") === await md("```js\nlet a = 1;\n```"), "an unclosed code block (mid-stream) renders like a closed one");
  for (const bad of ["[x](javascript:alert(1))", "[x](data:text/html,<b>)", "[x](vbscript:x)", "<a href=\"javascript:x\">y</a>", "[x](JaVaScRiPt:alert(1))"])
    check(!(await md(bad)).includes("<a "), `no link from ${bad}`);
  check((await md("see https://example.com/a_b_c.")).includes('<a href="https://example.com/a_b_c" target="_blank" rel="noopener noreferrer">https://example.com/a_b_c</a>.'), "bare URLs become links");
  check(await md("a \\| b \\*not em\\*") === "<p>a | b *not em*</p>", "backslash escapes");
  check(await md("| a | b |\n|---|---|\n| `x|y` | z \\| w |") === '<div class="table-wrap"><table><thead><tr><th>a</th><th>b</th></tr></thead><tbody><tr><td><code>x|y</code></td><td>z | w</td></tr></tbody></table></div>',
    "pipes inside code and escaped pipes stay in their cell");
  const think = await page.evaluate(() => renderReply({ content: "<think>Let me see <b>.</think>The answer." }));
  check(think.startsWith('<details class="think"><summary>Thinking</summary><p>Let me see &lt;b&gt;.</p></details><p>The answer.</p>'), "a <think> block folds away, escaped");

  // Copy buttons put the code on the clipboard.
  await reply.locator("button.copy-code").click();
  await page.waitForFunction(() => document.getElementById("toast").textContent === "Code copied");
  check(await page.evaluate(() => navigator.clipboard.readText()) === CODE, "the code block's copy button puts the code on the clipboard");
  await page.locator(".msg.user button.copy-msg").click();
  await page.waitForFunction(() => document.getElementById("toast").textContent === "Message copied");
  check(await page.evaluate(() => navigator.clipboard.readText()) === "Show me everything", "a message's copy button copies its text");

  // Regenerate: a second version beside the first, both kept.
  replies.push("Second answer");
  await page.locator(".msg.assistant button.regen").click();
  await idle(page, 10000);
  check(requests.length === 2 && requests[1].messages.length === 1 && requests[1].messages[0].content === "Show me everything", "regenerate asks again with the history before the answer");
  const pos = (role) => page.locator(`.msg.${role} .branch .pos`).textContent();
  check(await pos("assistant") === "2/2" && await reply.textContent() === "Second answer", "regenerate adds version 2/2");
  await page.click(".msg.assistant .branch button.prev");
  check(await pos("assistant") === "1/2" && await reply.locator("table").count() === 1, "‹ shows version 1/2 again");
  await page.click(".msg.assistant .branch button.next");
  check(await pos("assistant") === "2/2" && await reply.textContent() === "Second answer", "› back to 2/2");

  // While an answer streams, the thread's buttons are out of the way and other chats wait.
  let release;
  hold = new Promise((r) => { release = r; });
  replies.push("late");
  await page.locator(".msg.assistant button.regen").click();
  await page.waitForFunction(() => document.body.classList.contains("generating"));
  check(!(await page.locator(".msg.user button.edit").isVisible()) && !(await page.locator(".msg button.regen").first().isVisible()), "edit and regenerate hide while an answer streams");
  await page.click("#new-chat");
  check(await page.locator(".msg.user").count() === 1 && (await page.textContent("#toast")).startsWith("Stop the answer first"), "new chat waits until the answer is stopped");
  await page.keyboard.press("Escape");
  await idle(page, 5000);
  hold = null; release();
  check(await pos("assistant") === "3/3" && /stopped/.test(await page.locator(".msg.assistant .stats").textContent()), "a stopped regeneration is kept as version 3/3");
  await page.click(".msg.assistant .branch button.prev");

  // Edit: the edited message is a new version with its own answer; the old one stays.
  await page.click(".msg.user button.edit");
  const editor = page.locator(".msg.user .edit-box textarea");
  check(await editor.inputValue() === "Show me everything", "edit opens the message's text");
  await editor.fill("Show me less");
  await editor.press("Escape");
  check(await page.locator(".msg.user .bubble").textContent() === "Show me everything", "Escape cancels an edit");
  await page.click(".msg.user button.edit");
  await page.locator(".msg.user .edit-box textarea").fill("Show me less");
  replies.push("Third answer");
  await page.locator(".msg.user .edit-box textarea").press("Enter");
  await idle(page, 10000);
  check(requests.at(-1).messages.at(-1).content === "Show me less", "the edited text is sent");
  check(await pos("user") === "2/2" && await page.locator(".msg.user .bubble").textContent() === "Show me less" && await reply.textContent() === "Third answer",
    "the edit is version 2/2 with its answer");
  check(await page.locator(".msg.assistant .branch").count() === 0, "the new branch's answer has no siblings");
  await page.click(".msg.user .branch button.prev");
  check(await pos("user") === "1/2" && await page.locator(".msg.user .bubble").textContent() === "Show me everything"
    && await pos("assistant") === "2/3" && await reply.textContent() === "Second answer", "‹ on the message brings back the first branch, its answers kept");
  await page.screenshot({ path: join(outDir, "chat-desktop-branches.png"), animations: "disabled" });

  // Export, delete, import: the same tree comes back.
  const [download] = await Promise.all([page.waitForEvent("download"), page.click("#export-btn")]);
  const file = join(outDir, "exported-conversation.json");
  await download.saveAs(file);
  const exported = JSON.parse(readFileSync(file, "utf8"));
  const conv = exported.conversations[0];
  check(exported.format === "llamafile-chat" && exported.conversations.length === 1 && Object.keys(conv.nodes).length === 6,
    "export writes the conversation with every version (6 messages)");
  const [all] = await Promise.all([page.waitForEvent("download"), page.click("#export-all")]);
  const allFile = join(outDir, "exported-all.json");
  await all.saveAs(allFile);
  check(JSON.parse(readFileSync(allFile, "utf8")).conversations.length === 1, "Export all writes every conversation");
  const title = await page.locator("#conversations li.active button.open").textContent();
  await page.click("#conversations li.active button.delete");
  check(await page.locator("#conversations li button.open").count() === 0 && await page.isVisible("#empty"), "the conversation is deleted (after a confirmation)");
  await page.setInputFiles("#import-file", file);
  await page.waitForSelector(".msg.assistant");
  check(await page.locator("#conversations li.active button.open").textContent() === title, "import brings it back, with its title");
  check(await pos("user") === "1/2" && await pos("assistant") === "2/3" && await reply.textContent() === "Second answer", "with the same versions selected");
  await page.click(".msg.assistant .branch button.prev");
  check(await reply.locator("table tbody tr").count() === 2 && await reply.locator(".code pre code").textContent() === CODE, "and the same text");
  await page.setInputFiles("#import-file", { name: "openai.json", mimeType: "application/json", buffer: Buffer.from(JSON.stringify({ messages: [
    { role: "system", content: "ignored" }, { role: "user", content: "Flat question" }, { role: "assistant", content: "Flat <i>answer</i>" }] })) });
  await page.waitForFunction(() => document.querySelector(".msg.user .bubble")?.textContent === "Flat question");
  check(await page.locator(".msg.assistant .bubble").textContent() === "Flat <i>answer</i>" && await page.locator("#conversations li").count() === 2,
    "a flat OpenAI-style messages list imports too, HTML as text");
  await page.setInputFiles("#import-file", { name: "bad.json", mimeType: "application/json", buffer: Buffer.from("{not json") });
  await page.waitForFunction(() => document.getElementById("toast").textContent.startsWith("Not a JSON file"));
  check(await page.locator("#conversations li").count() === 2, "a broken file is refused with a message");

  // Attachments: the file's text goes with the message.
  await page.click("#new-chat");
  await page.setInputFiles("#file-input", [{ name: "notes.txt", mimeType: "text/plain", buffer: Buffer.from("The launch code is 4242.\n") },
    { name: "blob.bin", mimeType: "application/octet-stream", buffer: Buffer.from([0, 1, 2, 0]) }]);
  await page.waitForFunction(() => document.getElementById("toast").textContent.includes("not a text file"));
  check(await page.locator("#attachments .chip").allTextContents().then((t) => t.join("|")).then((t) => t.includes("notes.txt") && !t.includes("blob.bin")),
    "a text file attaches, a binary one is refused");
  await send("What is the launch code?", "The code is 4242.");
  const sent = requests.at(-1).messages.at(-1).content;
  check(sent.includes("The launch code is 4242.") && sent.includes("notes.txt") && sent.endsWith("What is the launch code?"), "the attached text is in the request");
  check(await page.locator(".msg.user .files .chip").textContent().then((t) => t.includes("notes.txt")) && await page.locator("#attachments .chip").count() === 0,
    "the message shows the file's name; the composer is cleared");

  // Images: this server has no projector, so the image button is off and says why; with one
  // (a canned /props), an image attaches with a thumbnail and goes as an image_url part.
  check(await page.locator("#image-btn").isDisabled() && (await page.getAttribute("#image-btn", "title")).includes("no projector"),
    "without a projector the image button is disabled and says why");
  await page.route("**/props", (route) => route.fulfill({ status: 200, headers: { "content-type": "application/json" },
    body: JSON.stringify({ modalities: { vision: true, audio: false }, default_generation_settings: { params: {} } }) }));
  await page.reload();
  await page.waitForFunction(() => !document.getElementById("image-btn").disabled);
  const DOT = Buffer.from("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAACQd1PeAAAADElEQVR4nGP4z8AAAAMBAQDJ/pLvAAAAAElFTkSuQmCC", "base64");
  await page.click("#new-chat");
  await page.setInputFiles("#image-input", { name: "dot.png", mimeType: "image/png", buffer: DOT });
  await page.waitForSelector("#attachments .chip img");
  await send("What is it?", "A dot.");
  const parts = requests.at(-1).messages.at(-1).content;
  check(Array.isArray(parts) && parts[0].type === "image_url" && parts[0].image_url.url === "data:image/png;base64," + DOT.toString("base64")
    && parts[1].type === "text" && parts[1].text === "What is it?", "the image goes as an image_url part before the text");
  check(await page.locator(".msg.user .files img").count() === 1, "the message shows the image's thumbnail");
  await page.unroute("**/props");

  // An answer edited by hand becomes a new version; nothing is asked of the server.
  const asked = requests.length;
  await page.click(".msg.assistant button.edit");
  await page.locator(".msg.assistant .edit-box textarea").fill("The code is **4243**.");
  await page.locator(".msg.assistant .edit-box button.primary").click();
  check(requests.length === asked && await pos("assistant") === "2/2" && await page.locator(".msg.assistant .bubble strong").textContent() === "4243",
    "editing an answer adds version 2/2, rendered, without a request");

  // Dark mode: follows the system, the toggle overrides it and is remembered.
  const bg = () => page.evaluate(() => getComputedStyle(document.body).backgroundColor);
  const light = await bg();
  check(await page.getAttribute("#theme-btn", "aria-pressed") === "false", "light system: the page is light");
  await page.click("#theme-btn");
  check(await page.getAttribute("#theme-btn", "aria-pressed") === "true" && await bg() !== light, `the toggle makes it dark (${light} -> ${await bg()})`);
  await page.click("#conversations li:last-child button.open"); // the Markdown conversation
  await page.screenshot({ path: join(outDir, "chat-desktop-dark.png"), animations: "disabled" });
  await page.reload();
  check(await page.getAttribute("html", "data-theme") === "dark" && await bg() !== light, "dark mode is kept across a reload");
  await page.click("#theme-btn");
  check(await bg() === light, "and toggles back to light");
  await page.click("#settings-btn");
  await page.selectOption("#s-theme", "system");
  await page.keyboard.press("Escape");
  await page.emulateMedia({ colorScheme: "dark" });
  await page.waitForFunction(() => document.getElementById("theme-btn").getAttribute("aria-pressed") === "true");
  check(await bg() !== light, "set to follow the system, it turns dark with the system");
  await page.emulateMedia({ colorScheme: "light" });

  // Keyboard and labels.
  check((await unlabelled(page)).length === 0, "every control has a label: " + (await unlabelled(page)).join(" "));
  await page.focus("#input");
  await page.keyboard.press("Shift+Tab");
  check(await page.evaluate(() => document.activeElement.id) === "attach-btn", "Shift+Tab from the message box reaches the attach button");
  const outline = await page.evaluate(() => getComputedStyle(document.activeElement).outlineStyle);
  check(outline !== "none", `a focused control shows a focus ring (${outline})`);
  await page.click("#menu-btn");
  check(!(await page.isVisible("#sidebar")) && await page.getAttribute("#menu-btn", "aria-expanded") === "false", "desktop: the menu button folds the conversation list away");
  await page.click("#menu-btn");
  check(await page.isVisible("#sidebar"), "and brings it back");

  // A phone-sized screen: the table scrolls inside the reply, not the page.
  await page.click("#conversations li:last-child button.open");
  await page.setViewportSize({ width: 390, height: 844 });
  await page.waitForTimeout(300);
  check(await page.evaluate(() => document.documentElement.scrollWidth <= 390), "phone: the Markdown reply fits the screen");
  await page.screenshot({ path: join(outDir, "chat-phone-markdown.png"), animations: "disabled" });
  await page.click("#settings-btn");
  const box = await page.locator("#settings").boundingBox();
  const topK = await page.locator("#s-top_k").boundingBox();
  check(box.x >= 0 && box.width <= 390 && topK.x + topK.width <= 390 && await page.isVisible("#s-seed"), "phone: the settings panel fits the screen");
  await page.screenshot({ path: join(outDir, "chat-phone-settings.png"), animations: "disabled" });
  await page.keyboard.press("Escape");

  // The composer's error path: a server error shows in the thread.
  await page.unroute("**/v1/chat/completions");
  await page.route("**/v1/chat/completions", (route) => route.fulfill({ status: 400, headers: { "content-type": "application/json" },
    body: JSON.stringify({ error: { code: 400, type: "exceed_context_size_error", message: "the request exceeds the available context size" } }) }));
  await page.fill("#input", "x");
  await page.press("#input", "Enter");
  await idle(page, 10000);
  check(/exceeds the available context size/.test(await page.locator(".msg.assistant.error .bubble").last().textContent()), "a server error shows in the thread");
  seen.verify("canned");
  await context.close();
}
