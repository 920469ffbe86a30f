// The live log tail: asks the console for what bot.log gained since the last look, every two seconds.
(function () {
  "use strict";
  var list = document.getElementById("log");
  if (!list) { return; }
  var offset = list.dataset.offset;
  var level = list.dataset.level;
  var live = document.getElementById("live");
  var MAX_ITEMS = 1000;
  if (live) { live.hidden = false; }
  window.scrollTo(0, document.body.scrollHeight);  // the newest lines are at the end

  function add(record) {
    var empty = list.querySelector(".empty");
    if (empty) { empty.remove(); }
    var item = document.createElement("li");
    item.className = "lvl-" + record.level.toLowerCase();
    var pre = document.createElement("pre");
    pre.textContent = record.text;  // text, never HTML
    item.appendChild(pre);
    list.appendChild(item);
    while (list.children.length > MAX_ITEMS) { list.removeChild(list.firstChild); }
  }

  function poll() {
    var url = "/logs/tail?level=" + encodeURIComponent(level) + "&after=" + encodeURIComponent(offset);
    fetch(url, { credentials: "same-origin", cache: "no-store" })
      .then(function (response) {
        if (!response.ok) { throw new Error(String(response.status)); }
        return response.json();
      })
      .then(function (data) {
        var atBottom = window.innerHeight + window.scrollY >= document.body.scrollHeight - 40;
        data.records.forEach(add);
        offset = data.offset;
        list.dataset.offset = offset;
        if (data.records.length && atBottom) { window.scrollTo(0, document.body.scrollHeight); }
        if (live) { live.textContent = "live"; live.className = "live"; }
      })
      .catch(function () {
        if (live) { live.textContent = "not connected"; live.className = "live off"; }
      })
      .finally(function () { window.setTimeout(poll, 2000); });
  }
  window.setTimeout(poll, 2000);
}());
