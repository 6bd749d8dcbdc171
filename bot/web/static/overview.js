// The overview, live: its changing parts come again from the server-sent event stream named by
// #live's data-events, already rendered (and escaped) by the server, and replace the old ones.
// A plain module: no library, no build step; the CSP allows scripts from the console only.

const live = document.getElementById("live");

function follow(element) {
  const stream = new EventSource(element.dataset.events);
  stream.addEventListener("overview", (message) => {
    const parsed = new DOMParser().parseFromString(message.data, "text/html");
    element.replaceChildren(...parsed.body.childNodes);
    element.dataset.updated = new Date().toISOString();
  });
  stream.addEventListener("error", () => {
    // The browser reconnects on its own; it gives up when the stream is not one any more (the
    // session ended: the login page came instead). The parts shown are then marked as stale.
    if (stream.readyState === EventSource.CLOSED) {
      element.classList.add("stale");
    }
  });
}

if (live && "EventSource" in window) {
  follow(live);
}
