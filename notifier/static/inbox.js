// The dev inbox list, kept current: one server-sent event per change (no polling), then one
// fetch of the list; search as you type; a dialog before Delete all; and the message
// view's frame grown to its email's height. Without this script the pages still work (the
// search form submits, Delete all asks on a page of its own, the frame scrolls).
"use strict";

// Delete all asks first; the server empties the inbox only with the confirm field.
(() => {
  const form = document.getElementById("delete-all");
  if (!form) return;
  form.addEventListener("submit", (event) => {
    if (!window.confirm("Delete every message in the inbox? This cannot be undone.")) {
      event.preventDefault();
      return;
    }
    const confirmed = document.createElement("input");
    confirmed.type = "hidden";
    confirmed.name = "confirm";
    confirmed.value = "delete-all";
    form.append(confirmed);
  });
})();

// The email's frame as tall as the email, so nothing is cut off at any width: the frame's
// one script posts its height. Only a number from that frame is taken, and capped.
(() => {
  const frame = document.querySelector(".email-frame");
  if (!frame) return;
  const tallest = 50000;
  window.addEventListener("message", (event) => {
    if (event.source !== frame.contentWindow) return;
    const height = event.data && event.data.emailHeight;
    if (typeof height !== "number" || !Number.isFinite(height) || height <= 0) return;
    frame.style.height = `${Math.min(Math.ceil(height), tallest)}px`;
  });
})();

(() => {
  const list = document.getElementById("messages");
  if (!list) return;
  const live = document.getElementById("live");
  const count = document.getElementById("count");
  const empty = document.getElementById("empty");
  const search = document.getElementById("q");
  let version = list.dataset.version;
  let fetching = false;
  let again = false;

  const plural = (n) => `${n} message${n === 1 ? "" : "s"}`;
  const pad = (n) => String(n).padStart(2, "0");
  const day = (at) => `${at.getFullYear()}-${pad(at.getMonth() + 1)}-${pad(at.getDate())}`;
  // Today's mail by its time, older mail with its date (as the server writes it).
  function when(at) {
    const time = `${pad(at.getHours())}:${pad(at.getMinutes())}`;
    return day(at) === day(new Date()) ? time : `${day(at)} ${time}`;
  }

  function item(message) {
    const li = document.createElement("li");
    const a = document.createElement("a");
    a.className = "message";
    a.href = `/dev/inbox/${message.number}`;
    const subject = document.createElement("span");
    subject.className = "subject";
    subject.textContent = message.subject || "(no subject)";
    const who = document.createElement("span");
    who.className = "who";
    who.textContent = `From ${message.from} · To ${message.to.join(", ")}`;
    const time = document.createElement("time");
    time.dateTime = message.received_at;
    time.textContent = when(new Date(message.received_at));
    const preview = document.createElement("span");
    preview.className = "preview";
    preview.textContent = message.preview;
    a.append(subject, who, time, preview);
    const carries = ["link", "code"].filter((kind) => message[kind]);
    if (carries.length) {
      const badge = document.createElement("span");
      badge.className = "badge";
      badge.textContent = carries.join(" · ");
      a.append(badge);
    }
    li.append(a);
    return li;
  }

  function render(body, query) {
    const before = list.children.length;
    list.replaceChildren(...body.messages.map(item));
    count.textContent = plural(body.total) + (query ? ` · ${body.messages.length} shown` : "");
    empty.hidden = body.messages.length > 0;
    if (query) {
      empty.textContent = `No message whose subject, addresses or text contain “${query}”.`;
    } else {
      const start = document.createElement("a");
      start.href = "/";
      start.textContent = "start page";
      empty.replaceChildren(
        "No mail yet. Ask for a verification (see the walk on the ",
        start,
        ") and it appears here by itself.",
      );
    }
    const added = body.messages.length - before;
    if (added > 0 && !query) live.textContent = `${plural(added)} arrived.`;
  }

  // At most one fetch in flight; changes during it cause exactly one more.
  async function refresh() {
    if (fetching) {
      again = true;
      return;
    }
    fetching = true;
    try {
      do {
        again = false;
        const query = search.value.trim();
        const response = await fetch(`/dev/inbox.json?q=${encodeURIComponent(query)}`, {
          cache: "no-store",
        });
        if (!response.ok) break;
        const messages = await response.json();
        const total = Number(response.headers.get("X-Inbox-Total") ?? messages.length);
        render({ messages, total }, query);
      } while (again);
    } catch {
      live.textContent = "Could not reach notifier dev; retrying when it is back.";
    } finally {
      fetching = false;
    }
  }

  const events = new EventSource("/dev/inbox/events");
  events.addEventListener("inbox", (event) => {
    if (event.data !== version) {
      version = event.data;
      refresh();
    }
  });
  events.addEventListener("open", () => {
    live.textContent = "Live: new mail appears by itself.";
    list.dataset.live = "true";
  });
  events.addEventListener("error", () => {
    live.textContent = "Reconnecting to notifier dev…";
    list.dataset.live = "false";
  });

  let typing = 0;
  search.addEventListener("input", () => {
    clearTimeout(typing);
    typing = setTimeout(() => {
      const query = search.value.trim();
      const url = query ? `?q=${encodeURIComponent(query)}` : location.pathname;
      history.replaceState(null, "", url);
      refresh();
    }, 150);
  });
  search.form.addEventListener("submit", (event) => {
    event.preventDefault();
    clearTimeout(typing);
    refresh();
  });
})();
