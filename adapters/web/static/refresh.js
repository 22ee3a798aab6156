// Keeps a list page current: its main part is fetched again every few seconds and replaced
// when it changed, so new sessions, running markers and answered prompts show without a reload.
(function () {
  "use strict";
  var main = document.getElementById("main");
  if (!main || !window.fetch || !window.DOMParser) { return; }
  function tick() {
    if (document.activeElement && document.activeElement.closest("form")) {
      return; // never under the viewer's hands
    }
    fetch(window.location.href, { credentials: "same-origin" })
      .then(function (r) { return r.ok ? r.text() : null; })
      .then(function (html) {
        if (html === null) { return; }
        var fresh = new DOMParser().parseFromString(html, "text/html").getElementById("main");
        if (fresh && fresh.innerHTML !== main.innerHTML) { main.innerHTML = fresh.innerHTML; }
      })
      .catch(function () {});
  }
  window.setInterval(tick, 2000);
})();
