// The web chat: sends the form with fetch, shows the answer as it is written (Server-Sent Events), and
// reloads the history from the server after a reconnection it cannot resume. Nothing a visitor or the model
// wrote is ever put into the page as markup: user texts go in as text; answers come as HTML the server made
// with raw HTML turned off (markdown-it-py), so a <script> in either is shown, not run.
(function () {
  "use strict";
  var root = document.getElementById("chat");
  if (!root) { return; }
  var base = root.dataset.base;
  var list = document.getElementById("messages");
  var form = document.getElementById("chat-form");
  var input = document.getElementById("chat-text");
  var statusLine = document.getElementById("chat-status");
  var typing = document.getElementById("chat-typing");
  var sent = {};          // the ids of messages this page sent (their "user" echo is not shown twice)
  var loading = false;    // the history is being reloaded: events wait in `held`
  var held = [];
  var lastAssistant = ""; // the last answer the reloaded history holds (not shown twice)

  function scrollDown() { window.scrollTo(0, document.body.scrollHeight); }
  function clearEmpty() { var e = document.getElementById("chat-empty"); if (e) { e.remove(); } }

  function bubble(role) {
    clearEmpty();
    var item = document.createElement("li");
    item.className = "msg " + role;
    var div = document.createElement("div");
    div.className = role === "assistant" ? "bubble md" : "bubble";
    item.appendChild(div);
    list.appendChild(item);
    return item;
  }
  function addUser(text) { bubble("user").firstChild.textContent = text; scrollDown(); }
  function addAnswer(html, stream) {
    var item = stream ? list.querySelector('li[data-stream="' + stream + '"]') : null;
    if (!item) { item = bubble("assistant"); if (stream) { item.dataset.stream = stream; } }
    item.firstChild.innerHTML = html;  // made by the server's Markdown renderer, raw HTML escaped
    scrollDown();
    return item;
  }
  function showStatus(text) {
    statusLine.textContent = text;
    statusLine.hidden = !text;
  }

  function apply(event) {
    if (loading) { held.push(event); return; }
    if (event.kind === "user") {
      if (!sent[event.client]) { addUser(event.text); }
    } else if (event.kind === "partial") {
      typing.hidden = true;
      addAnswer(event.html, event.stream).classList.add("streaming");
    } else if (event.kind === "discard") {
      var old = list.querySelector('li[data-stream="' + event.stream + '"]');
      if (old) { old.classList.remove("streaming"); old.removeAttribute("data-stream"); }
    } else if (event.kind === "final" || event.kind === "reply") {
      typing.hidden = true;
      if (lastAssistant && event.text === lastAssistant && !list.querySelector('li[data-stream="' + event.stream + '"]')) {
        lastAssistant = "";  // the reloaded history shows it already
        return;
      }
      var done = addAnswer(event.html, event.kind === "final" ? event.stream : null);
      done.classList.remove("streaming");
      done.removeAttribute("data-stream");
    }
  }

  function reload() {
    loading = true;
    fetch(base + "/history", { credentials: "same-origin", cache: "no-store" })
      .then(function (r) { if (!r.ok) { throw new Error(String(r.status)); } return r.json(); })
      .then(function (data) {
        list.textContent = "";
        lastAssistant = "";
        typing.hidden = true;
        data.messages.forEach(function (m) {
          if (m.role === "user") { addUser(m.text); } else { addAnswer(m.html, null); lastAssistant = m.text; }
        });
      })
      .catch(function () { showStatus("Could not load the conversation; reload the page."); })
      .then(function () {
        loading = false;
        var waiting = held; held = [];
        // an answer that arrived while the history loaded and that the history holds already is not shown
        // twice: neither its pieces nor its end
        var shown = {};
        waiting.forEach(function (e) {
          if ((e.kind === "final" || e.kind === "reply") && lastAssistant && e.text === lastAssistant) {
            shown[e.stream || e.id] = true;
          }
        });
        waiting.forEach(function (e) {
          if (!shown[e.stream || e.id]) { apply(e); } else if (e.kind !== "partial") { lastAssistant = ""; }
        });
      });
  }

  var source = new EventSource(base + "/events");
  source.addEventListener("hello", function (e) {
    showStatus("");
    root.dataset.connected = "yes";  // (the tests wait for it)
    var hello = JSON.parse(e.data);
    if (!hello.resumed) { reload(); }
  });
  source.addEventListener("message", function (e) { apply(JSON.parse(e.data)); });
  source.addEventListener("typing", function () { if (!loading) { typing.hidden = false; scrollDown(); } });
  source.onerror = function () { delete root.dataset.connected; showStatus("Connection lost; reconnecting…"); };

  function send() {
    var text = input.value.trim();
    if (!text) { return; }
    var client = Math.random().toString(36).slice(2) + Date.now().toString(36);
    var body = new URLSearchParams(new FormData(form));
    body.set("text", text);
    body.set("client", client);
    sent[client] = true;
    showStatus("");
    fetch(form.action, { method: "POST", body: body, credentials: "same-origin",
                         headers: { "Accept": "application/json" } })
      .then(function (r) {
        return r.json().catch(function () { return {}; }).then(function (data) {
          if (!r.ok) { throw new Error(data.error || ("The message was not sent (" + r.status + ").")); }
          addUser(text);
          input.value = "";
        });
      })
      .catch(function (err) { showStatus(err.message); });
  }
  form.addEventListener("submit", function (e) { e.preventDefault(); send(); });
  input.addEventListener("keydown", function (e) {
    if (e.key === "Enter" && !e.shiftKey && !e.isComposing) { e.preventDefault(); send(); }
  });
  scrollDown();
})();
