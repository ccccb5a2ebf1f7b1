// Helpers shared by the chat page's browser suites.

export function check(cond, what) {
  if (!cond) throw new Error("check failed: " + what);
  console.log("ok: " + what);
}

/// Records script errors, dialogs and every URL the page asks for; `verify` fails on any error
/// and on any request to another host.
export function watch(page, base) {
  const seen = { errors: [], urls: [], dialogs: [] };
  page.on("pageerror", (e) => seen.errors.push(String(e)));
  page.on("request", (r) => seen.urls.push(r.url()));
  page.on("dialog", (d) => { seen.dialogs.push(d.type() + ": " + d.message()); d.type() === "confirm" ? d.accept() : d.dismiss(); });
  seen.verify = (name) => {
    const foreign = seen.urls.filter((u) => !u.startsWith(base) && !u.startsWith("blob:") && !u.startsWith("data:"));
    check(foreign.length === 0, `${name}: the page loads nothing from other hosts` + (foreign.length ? ": " + foreign.join(" ") : ""));
    check(seen.errors.length === 0, `${name}: no script errors` + (seen.errors.length ? ": " + seen.errors.join("; ") : ""));
  };
  return seen;
}

export const generating = (page) => page.evaluate(() => document.body.classList.contains("generating"));
export const idle = (page, timeout = 60000) =>
  page.waitForFunction(() => !document.body.classList.contains("generating"), null, { timeout });

/// Every control has a name a screen reader can say: its text, aria-label, aria-labelledby,
/// title, or a <label> around or for it. Returns the controls without one.
export function unlabelled(page) {
  return page.evaluate(() => [...document.querySelectorAll("button, input, textarea, select")].filter((el) => {
    if (el.getAttribute("aria-label") || el.getAttribute("aria-labelledby") || el.title) return false;
    if (el.tagName === "BUTTON" && el.textContent.trim()) return false;
    if (el.closest("label") || (el.id && document.querySelector(`label[for="${el.id}"]`))) return false;
    return true;
  }).map((el) => el.outerHTML.slice(0, 80)));
}
