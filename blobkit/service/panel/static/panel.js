// The Train panel's script: polling regions that update by themselves, copy buttons, times in the viewer's
// time zone. Everything works without it except the live updates (reload the page instead).
"use strict";

function localTimes(root) {
  for (const el of root.querySelectorAll("time[datetime]")) {
    const when = new Date(el.getAttribute("datetime"));
    if (!isNaN(when)) {
      el.textContent = when.toLocaleString();
      el.title = el.getAttribute("datetime");
    }
  }
}

function syncBases(root) {
  const holder = root.querySelector("[data-bases]");
  const select = document.querySelector("[data-bases-select]");
  if (!holder || !select) return;
  const bases = (holder.getAttribute("data-bases") || "").split(",").filter(Boolean);
  const chosen = select.value;
  const current = Array.from(select.options).map((o) => o.value);
  if (current.join(",") !== bases.join(",")) {
    select.replaceChildren(...bases.map((base) => new Option(base, base, false, base === chosen)));
  }
  const button = document.getElementById("train-button");
  const help = document.getElementById("train-help");
  if (button) button.disabled = bases.length === 0;
  if (help) {
    help.textContent = bases.length === 0
      ? "Connect a worker first: this button is enabled when one advertises a model."
      : "The job is queued; a connected worker that runs the model claims it.";
  }
}

function poll(region) {
  const url = region.getAttribute("data-poll");
  const every = Number(region.getAttribute("data-interval") || "2000");
  const stopWhenTerminal = region.hasAttribute("data-stop-when-terminal");
  let failures = 0;
  async function tick() {
    try {
      const response = await fetch(url, {credentials: "same-origin", headers: {"X-Panel-Fragment": "1"}});
      if (response.status === 401) {
        region.insertAdjacentHTML("afterbegin",
          '<p class="alert" role="alert">You are signed out: reload the page and sign in again.</p>');
        return;
      }
      if (!response.ok) throw new Error("HTTP " + response.status);
      const html = await response.text();
      const focused = document.activeElement && region.contains(document.activeElement)
        ? document.activeElement.id : null;
      region.innerHTML = html;
      localTimes(region);
      syncBases(region);
      if (focused && document.getElementById(focused)) document.getElementById(focused).focus();
      failures = 0;
      const live = region.querySelector("[data-terminal]");
      if (stopWhenTerminal && live && live.getAttribute("data-terminal") === "true") {
        const cancel = document.getElementById("cancel-form");
        if (cancel) cancel.remove();
        return;
      }
    } catch (err) {
      failures += 1;
    }
    setTimeout(tick, failures ? Math.min(every * (failures + 1), 15000) : every);
  }
  const live = region.querySelector("[data-terminal]");
  if (stopWhenTerminal && live && live.getAttribute("data-terminal") === "true") return;
  setTimeout(tick, every);
}

async function copy(button) {
  const source = document.getElementById(button.getAttribute("data-copy"));
  if (!source) return;
  const text = source.textContent.trim();
  let done = false;
  try {
    await navigator.clipboard.writeText(text);
    done = true;
  } catch (err) {
    const range = document.createRange();
    range.selectNodeContents(source);
    const selection = window.getSelection();
    selection.removeAllRanges();
    selection.addRange(range);
    done = document.execCommand && document.execCommand("copy");
  }
  const label = button.getAttribute("data-label") || button.textContent;
  button.setAttribute("data-label", label);
  button.textContent = done ? "Copied" : "Select and copy it (Ctrl+C)";
  setTimeout(() => { button.textContent = label; }, 2000);
}

document.addEventListener("DOMContentLoaded", () => {
  localTimes(document);
  for (const region of document.querySelectorAll("[data-poll]")) poll(region);
  document.addEventListener("click", (event) => {
    const button = event.target.closest("button[data-copy]");
    if (button) copy(button);
  });
  for (const form of document.querySelectorAll("form")) {
    form.addEventListener("submit", () => {
      const button = form.querySelector("button[type=submit]");
      if (button && form.id !== "cancel-form") {
        setTimeout(() => { button.disabled = true; button.setAttribute("aria-busy", "true"); }, 0);
      }
    });
  }
});
