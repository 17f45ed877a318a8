// The live table: turns arrive as server-sent events holding HTML the server escaped; this file only places them.
(function () {
  const root = document.getElementById("deliberation");
  if (!root) return;
  const transcript = document.getElementById("transcript");
  const status = document.getElementById("status");
  const askBox = document.getElementById("ask");
  const waiting = document.getElementById("waiting");
  const nodes = (html) => { const t = document.createElement("template"); t.innerHTML = html; return t.content; };

  const source = new EventSource(root.dataset.stream + "?after=" + encodeURIComponent(root.dataset.after));
  source.addEventListener("event", (e) => transcript.appendChild(nodes(e.data)));
  source.addEventListener("status", (e) => {
    status.innerHTML = e.data;
    const badge = document.getElementById("status-badge");
    const state = badge ? badge.dataset.status : "";
    if (["done", "failed", "stopped"].includes(state)) {
      if (waiting) waiting.hidden = true;
      const stop = document.getElementById("stop-form");
      if (stop) stop.remove();
    }
  });
  source.addEventListener("ask", () => {
    fetch(root.dataset.ask, { credentials: "same-origin" }).then((r) => r.text()).then((html) => {
      askBox.innerHTML = html;
      if (window.htmx) window.htmx.process(askBox);
      const field = askBox.querySelector("textarea, select, input[type=number]");
      if (field) field.focus();
    });
  });
  source.addEventListener("end", () => source.close());

  // The visible timeout: the server says how many seconds were left when it drew the form (no clock is shared).
  setInterval(() => {
    document.querySelectorAll(".countdown[data-left]").forEach((el) => {
      if (!el.dataset.end) el.dataset.end = String(Date.now() / 1000 + parseFloat(el.dataset.left));
      const left = Math.max(0, Math.round(parseFloat(el.dataset.end) - Date.now() / 1000));
      el.textContent = left + " s left";
    });
  }, 1000);
})();
