// A conversation opens at its newest message (or, paging back, at the end of the older page,
// where reading upwards goes on), not at the top of the page; an address with a #fragment
// goes where it says.
(function () {
  "use strict";
  var conversation = document.getElementById("conversation");
  if (!conversation || conversation.dataset.openAt !== "end" || window.location.hash) { return; }
  var last = conversation.lastElementChild;
  if (last) { last.scrollIntoView({ block: "end" }); }
})();

// Follows the session's live events: a running task's text as it streams, its tool calls and
// results; when something lands in the archive (a message, a reply, a prompt), the page is
// loaded again, unless the viewer is typing, who is then told instead.
(function () {
  "use strict";
  var live = document.getElementById("live");
  if (!live || !window.EventSource) { return; }
  var box = document.getElementById("content");
  var reloadOn = ["user", "text", "done", "error", "canceled", "confirm", "ask_user", "answer"];
  var current = null;

  function line(cls, text) {
    var p = document.createElement("p");
    p.className = cls;
    p.textContent = text;
    live.appendChild(p);
    return p;
  }

  function refresh() {
    if (box && box.value.trim()) {
      if (!document.getElementById("stale")) {
        var note = line("notice", "New messages arrived. ");
        note.id = "stale";
        var link = document.createElement("a");
        link.href = window.location.pathname;
        link.textContent = "Show them";
        note.appendChild(link);
      }
      return;
    }
    window.location.reload();
  }

  var source = new EventSource(live.dataset.events);
  source.addEventListener("state", function (e) {
    // Something happened between rendering this page and following it.
    if (JSON.parse(e.data) !== live.dataset.state) { source.close(); refresh(); }
  });
  source.addEventListener("text_delta", function (e) {
    var event = JSON.parse(e.data);
    if (!current) { current = line("streaming", ""); }
    current.textContent += event.text;
  });
  source.addEventListener("tool_call", function (e) {
    var event = JSON.parse(e.data);
    current = null;
    line("tool", "→ " + event.tool + " " + JSON.stringify(event.args));
  });
  source.addEventListener("tool_result", function (e) {
    var event = JSON.parse(e.data);
    line("tool " + event.status, "← " + event.tool + " (" + event.status + "): " + event.result);
  });
  source.addEventListener("signed_out", function () {
    source.close();
    line("notice", "Your sign-in has ended; reload the page to sign in again.");
  });
  reloadOn.forEach(function (kind) {
    source.addEventListener(kind, function () { source.close(); refresh(); });
  });
})();
