// Live parts: every element with data-live="<url>" and an id is re-fetched every 15 s (while the
// tab is visible and no field inside it has focus) and swapped for the same element of the fresh
// page. No library, no inline script (the CSP allows only our own files).
(function () {
  "use strict";
  var PERIOD_MS = 15000;
  function refresh(el) {
    if (document.hidden || el.contains(document.activeElement)) return;
    fetch(el.getAttribute("data-live"), { credentials: "same-origin", headers: { "X-Live": "1" } })
      .then(function (r) { return r.ok ? r.text() : null; })
      .then(function (html) {
        if (!html) return;
        var fresh = new DOMParser().parseFromString(html, "text/html").getElementById(el.id);
        if (fresh) { el.innerHTML = fresh.innerHTML; el.setAttribute("data-refreshed", new Date().toISOString()); }
      })
      .catch(function () { /* offline for a moment: try again next period */ });
  }
  function tick() { document.querySelectorAll("[data-live][id]").forEach(refresh); }
  window.driftwatchLiveRefresh = tick;
  setInterval(tick, PERIOD_MS);
})();
