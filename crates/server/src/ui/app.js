// The wasmgear dashboard's one script: asks before each action, and keeps the page live
// over the API's event stream (progress bars move at once; the rest of the page is fetched
// again, at most once a second). Without it the pages still work, only not live.
(function () {
  "use strict";

  document.addEventListener("submit", function (event) {
    var question = event.target.getAttribute("data-confirm");
    if (question && !window.confirm(question)) {
      event.preventDefault();
    }
  });

  var main = document.getElementById("main");
  if (!main || !main.hasAttribute("data-live") || !window.EventSource) {
    return;
  }
  var query = main.getAttribute("data-live");
  var source = new EventSource("/v1/events" + (query ? "?" + query : ""));
  // A page left for another is kept by the browser to come back to: its stream would hold
  // one of the few connections a browser opens to a server, and after a few pages the next
  // page could not load. Closed when the page is left; back on it, it loads anew.
  window.addEventListener("pagehide", function () {
    source.close();
  });
  window.addEventListener("pageshow", function (event) {
    if (event.persisted) {
      window.location.reload();
    }
  });
  document.documentElement.setAttribute("data-live", "connecting");
  // Once listening (and again after each reconnection), fetch the page once more: what
  // happened between rendering it and listening would otherwise be missed.
  source.addEventListener("open", function () {
    document.documentElement.setAttribute("data-live", "open");
    schedule();
  });

  function moveBars(data) {
    var bars = main.querySelectorAll("[data-progress-job]");
    for (var i = 0; i < bars.length; i++) {
      if (bars[i].getAttribute("data-progress-job") !== data.id) {
        continue;
      }
      var done = Number(data.done) || 0;
      var total = Number(data.total) || 0;
      var bar = bars[i].querySelector("progress");
      var text = bars[i].querySelector(".progress-text");
      if (bar) {
        bar.value = total > 0 ? Math.floor(Math.min(done, total) * 100 / total) : 0;
      }
      if (text) {
        text.textContent = (total > 0 ? done + "/" + total : String(done)) +
          (data.message ? " " + data.message : "");
      }
    }
  }

  var timer = null;
  var lastRefresh = 0;
  function refresh() {
    timer = null;
    // Never replace what someone is typing into.
    var focused = document.activeElement;
    if (focused && main.contains(focused) && /^(INPUT|SELECT|TEXTAREA)$/.test(focused.tagName)) {
      schedule();
      return;
    }
    lastRefresh = Date.now();
    fetch(window.location.href, {
      headers: { "X-Wasmgear-Fragment": "1" },
      credentials: "same-origin",
    }).then(function (response) {
      return response.ok ? response.text() : null;
    }).then(function (html) {
      if (html !== null) {
        main.innerHTML = html;
        main.setAttribute("data-refreshed", String(lastRefresh));
      }
    }).catch(function () {});
  }
  function schedule() {
    if (timer === null) {
      timer = window.setTimeout(refresh, Math.max(0, 1000 - (Date.now() - lastRefresh)));
    }
  }

  source.addEventListener("progress", function (event) {
    try {
      moveBars(JSON.parse(event.data));
    } catch (ignored) {
      // An event this page cannot read changes nothing on it.
    }
  });
  ["create", "start", "retry", "finish", "ready", "config", "cancel"].forEach(function (kind) {
    source.addEventListener(kind, schedule);
  });
})();
