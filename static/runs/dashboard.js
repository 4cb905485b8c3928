// Polling that does not flood the server: elements marked data-poll refresh themselves with
// htmx (hx-trigger="every Ns"); this script skips those polls while the tab is hidden, backs
// off while the server keeps answering "unchanged" (204) or failing, and refreshes at once
// when the tab becomes visible again.
(function () {
  "use strict";
  var MAX_SKIP = 7; // at most every 8th poll while nothing changes

  function state(elt) {
    if (!elt._poll) elt._poll = { streak: 0, skip: 0 };
    return elt._poll;
  }

  // A poll held back (tab hidden, rows ticked) is counted on the element, so a test (or a
  // curious operator) can see that polls came due and were not sent.
  function hold(elt, evt) {
    evt.preventDefault();
    elt.dataset.heldPolls = String((parseInt(elt.dataset.heldPolls || "0", 10) || 0) + 1);
  }

  document.addEventListener("htmx:confirm", function (evt) {
    var elt = evt.detail.elt;
    if (!elt || !elt.hasAttribute || !elt.hasAttribute("data-poll")) return;
    if (evt.detail.triggeringEvent && evt.detail.triggeringEvent.type === "refresh") return;
    var s = state(elt);
    if (document.hidden) { hold(elt, evt); return; }
    // A table with rows ticked for a bulk action holds still until they are unticked.
    if (elt.querySelector("input[data-pick]:checked")) { hold(elt, evt); return; }
    if (s.skip > 0) { s.skip -= 1; evt.preventDefault(); }
  });

  document.addEventListener("htmx:afterRequest", function (evt) {
    var elt = evt.detail.elt;
    if (!elt || !elt.hasAttribute || !elt.hasAttribute("data-poll")) return;
    var s = state(elt);
    var status = evt.detail.xhr ? evt.detail.xhr.status : 0;
    if (status === 200) { s.streak = 0; s.skip = 0; return; }
    // 204 (unchanged) or an error: wait 1, 3, 7, 7 … polls before asking again.
    s.streak += 1;
    s.skip = Math.min(Math.pow(2, s.streak) - 1, MAX_SKIP);
  });

  document.addEventListener("visibilitychange", function () {
    if (document.hidden || !window.htmx) return;
    document.querySelectorAll("[data-poll]").forEach(function (elt) {
      state(elt).skip = 0;
      window.htmx.trigger(elt, "refresh");
    });
  });
})();
