// Live parts: every element with data-live="<url>" and an id is re-fetched every 15 s, or every
// data-live-every seconds (a page following a running job asks for 2), while the tab is visible
// and no field inside it has focus, and swapped for the same element of the fresh page (whose
// data-live-every is taken over too: a finished job slows its page down again). No library, no
// inline script (the CSP allows only our own files).
(function () {
  "use strict";
  var DEFAULT_SECONDS = 15;
  var last = new WeakMap();
  var busy = new WeakSet();
  function period(el) {
    var seconds = parseFloat(el.getAttribute("data-live-every"));
    return 1000 * (seconds > 0 ? seconds : DEFAULT_SECONDS);
  }
  function refresh(el) {
    if (document.hidden || busy.has(el) || el.contains(document.activeElement)) return;
    busy.add(el);
    last.set(el, Date.now());
    fetch(el.getAttribute("data-live"), { credentials: "same-origin", headers: { "X-Live": "1" } })
      .then(function (r) { return r.ok ? r.text() : null; })
      .then(function (html) {
        if (!html) return;
        var fresh = new DOMParser().parseFromString(html, "text/html").getElementById(el.id);
        if (!fresh) return;
        el.innerHTML = fresh.innerHTML;
        var every = fresh.getAttribute("data-live-every");
        if (every) el.setAttribute("data-live-every", every); else el.removeAttribute("data-live-every");
        el.setAttribute("data-refreshed", new Date().toISOString());
      })
      .catch(function () { /* offline for a moment: try again next period */ })
      .then(function () { busy.delete(el); });
  }
  function due(el) {
    if (!last.has(el)) last.set(el, Date.now());  // the page itself is the first fetch
    return Date.now() - last.get(el) >= period(el);
  }
  function tick() { document.querySelectorAll("[data-live][id]").forEach(function (el) { if (due(el)) refresh(el); }); }
  window.driftwatchLiveRefresh = function () { document.querySelectorAll("[data-live][id]").forEach(refresh); };
  setInterval(tick, 1000);
})();
