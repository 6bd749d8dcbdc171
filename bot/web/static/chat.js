// The web chat, progressively: the form posts without this script too (the reply then shows on
// reload). With it, a message is posted in the background and the reply streams into the page
// through server-sent events: previews while the model writes, then the stored reply in their place.

const list = document.getElementById("chat");
const form = document.getElementById("chat-form");
const status = document.getElementById("chat-status");
const notices = document.getElementById("chat-notices");

function row(role, text, who) {
  const item = document.createElement("li");
  item.className = `message ${role}`;
  const meta = document.createElement("div");
  meta.className = "meta";
  const name = document.createElement("b");
  name.textContent = who;
  meta.append(`${new Date().toISOString().slice(0, 19).replace("T", " ")} `, name);
  const body = document.createElement("div");
  body.className = "text";
  body.textContent = text; // text, never markup
  item.append(meta, body);
  list.append(item);
  item.scrollIntoView({ block: "nearest" });
  return item;
}

function preview() {
  return list.querySelector("li.message.preview");
}

function known(selector) {
  return list.querySelector(selector) !== null;
}

function said(data) {
  if (data.nonce && known(`li[data-nonce="${CSS.escape(data.nonce)}"]`)) return;
  const item = row("user", data.text, "you");
  if (data.nonce) item.dataset.nonce = data.nonce;
}

function replied(data) {
  if (data.key && known(`li[data-key="${CSS.escape(data.key)}"]`)) {
    preview()?.remove();
    return;
  }
  const item = preview() ?? row("assistant", "", "agent");
  item.classList.remove("preview");
  item.querySelector(".text").textContent = data.text;
  if (data.key) item.dataset.key = data.key;
  status.textContent = "";
}

function stored(data) {
  // Caught up on reconnecting, or stored by any instance (the server's looks at the store): a
  // message the page shows already (by its key or id, through this server's push) stays as it is.
  if (data.role === "user") {
    said({ text: data.text, nonce: data.nonce });
  } else if (!(data.key && known(`li[data-key="${CSS.escape(data.key)}"]`))) {
    replied({ text: data.text, key: data.key });
  }
}

const handlers = {
  inbound: said,
  stored,
  reply: replied,
  preview(data) {
    const item = preview() ?? row("assistant preview", "", "agent");
    item.querySelector(".text").textContent = data.text;
    status.textContent = "";
  },
  withdraw() {
    preview()?.remove();
  },
  typing(data) {
    status.textContent = data.on ? "The agent is writing…" : "";
  },
  notice(data) {
    const item = document.createElement("li");
    item.textContent = data.text;
    notices.append(item);
  },
  reload() {
    window.location.reload();
  },
};

function listen() {
  const stream = new EventSource(list.dataset.events);
  for (const [kind, handle] of Object.entries(handlers)) {
    stream.addEventListener(kind, (event) => handle(JSON.parse(event.data)));
  }
  // A lost stream reconnects by itself, from the same `after`: what was stored since comes
  // again, and what the page shows already is known by its key or id and not added twice.
}

function nonce() {
  const bytes = crypto.getRandomValues(new Uint8Array(16));
  return btoa(String.fromCharCode(...bytes)).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
}

function sizeText(bytes) {
  if (bytes < 1000) return `${bytes} B`;
  if (bytes < 1000000) return `${Math.round(bytes / 1000)} KB`;
  return `${(bytes / 1000000).toFixed(1)} MB`;
}

async function answerOf(response) {
  // The chat answers in JSON; a body refused before it reaches the chat (too big) in plain text.
  const type = response.headers.get("Content-Type") ?? "";
  if (type.includes("application/json")) return response.json();
  return { stored: false, refusal: (await response.text()).trim() || null };
}

form.addEventListener("submit", async (event) => {
  event.preventDefault();
  const data = new FormData(form);
  const text = String(data.get("text") ?? "").trim();
  const file = form.elements.file.files[0];
  if (!text && !file) return;
  const limit = Number(form.dataset.maxBytes);
  if (file && limit && file.size > limit) {
    // Refused here, before sending: the text stays in the box.
    status.textContent = `That file is ${sizeText(file.size)}, over the ${sizeText(limit)} limit; nothing was sent.`;
    return;
  }
  if (!file) data.delete("file");
  const button = form.querySelector("button");
  button.disabled = true;
  try {
    const response = await fetch(form.action, {
      method: "POST", body: data, headers: { Accept: "application/json" }, credentials: "same-origin",
    });
    const answer = await answerOf(response);
    if (answer.stored) {
      said({ text: answer.shown ?? text, nonce: String(data.get("nonce")) });
      form.elements.text.value = "";
      form.elements.file.value = "";
      form.elements.nonce.value = nonce(); // the next message is another one
      status.textContent = answer.notice ?? "Sent.";
    } else {
      status.textContent = answer.refusal ?? `Not sent (${response.status}).`;
    }
  } catch (error) {
    status.textContent = `Not sent: ${error}. Try again.`;
  } finally {
    button.disabled = false;
  }
});

form.elements.text.addEventListener("keydown", (event) => {
  if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
    event.preventDefault();
    form.requestSubmit();
  }
});

listen();
