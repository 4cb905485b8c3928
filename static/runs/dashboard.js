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

// Any screen and any reader (issue 23): the narrow-screen menu, table cells labelled by their
// column (the cards of a narrow screen show the label), wide blocks that scroll with a hint and
// are reachable by keyboard, a "pause live updates" control, one permanent status region
// announcing what a refresh changed, and focus that survives every htmx swap.
(function () {
  "use strict";
  document.documentElement.classList.add("js");
  var PAUSED_KEY = "runledger.live.paused";

  function paused() {
    try { return window.localStorage.getItem(PAUSED_KEY) === "1"; } catch (e) { return false; }
  }

  function announce(text) {
    var region = document.getElementById("live-status");
    if (!region || !text) return;
    // Cleared first, so the same words said twice are heard twice.
    region.textContent = "";
    window.setTimeout(function () { region.textContent = text; }, 50);
  }

  // Each cell of a table gets its column's heading as data-label (shown on a card).
  function label(root) {
    (root.querySelectorAll ? root : document).querySelectorAll("table.grid").forEach(function (table) {
      var heads = table.querySelectorAll("thead th");
      if (!heads.length) return;
      var names = Array.prototype.map.call(heads, function (th) { return th.textContent.trim(); });
      table.querySelectorAll(":scope > tbody > tr").forEach(function (tr) {
        var i = 0;
        Array.prototype.forEach.call(tr.children, function (td) {
          if (td.tagName === "TD") {
            // A cell with nothing in it shows nothing on a card (not a lone label).
            td.classList.toggle("blank", !td.textContent.trim() && !td.querySelector("input, button, img, svg"));
          }
          if (td.tagName === "TD" && !td.hasAttribute("colspan") && names[i] && !td.classList.contains("pick")) {
            td.setAttribute("data-label", names[i]);
          }
          i += parseInt(td.getAttribute("colspan") || "1", 10) || 1;
        });
      });
    });
  }

  // A block wider than its box scrolls inside it: say so, and let a keyboard reach it.
  function hints(root) {
    (root.querySelectorAll ? root : document).querySelectorAll("pre, .card, .table-box, table.grid").forEach(function (box) {
      var wide = box.scrollWidth > box.clientWidth + 1;
      box.classList.toggle("scrolls", wide);
      if (!wide) return;
      if (!box.hasAttribute("tabindex") && !box.querySelector("a, button, input, select, textarea, summary")) {
        box.setAttribute("tabindex", "0");
        if (!box.hasAttribute("aria-label")) box.setAttribute("aria-label", "scrollable block");
      }
      if (box.tagName === "PRE" && !(box.nextElementSibling && box.nextElementSibling.classList.contains("scroll-hint"))) {
        var hint = document.createElement("p");
        hint.className = "scroll-hint";
        hint.textContent = "scroll sideways to see the rest";
        box.insertAdjacentElement("afterend", hint);
      }
    });
  }

  // What a swapped region says about its runs, keyed by run, to announce what changed.
  function statuses(root) {
    var out = {};
    if (!root || !root.querySelectorAll) return out;
    var all = Array.prototype.slice.call(root.querySelectorAll("[data-announce-key]"));
    if (root.hasAttribute && root.hasAttribute("data-announce-key")) all.push(root);
    all.forEach(function (el) { out[el.getAttribute("data-announce-key")] = el.getAttribute("data-announce"); });
    return out;
  }

  // How to find the focused element again in the new content: its id, or what it points at.
  function focusKey(el) {
    if (!el || el === document.body) return null;
    return {
      id: el.id, tag: el.tagName, href: el.getAttribute("href"), name: el.getAttribute("name"),
      value: el.getAttribute("value"), text: (el.textContent || "").trim().slice(0, 200),
    };
  }

  function findAgain(key) {
    if (key.id) return document.getElementById(key.id);
    var found = null;
    document.querySelectorAll(key.tag).forEach(function (el) {
      if (found) return;
      if (key.href !== null && el.getAttribute("href") !== key.href) return;
      if (key.name !== null && (el.getAttribute("name") !== key.name || el.getAttribute("value") !== key.value)) return;
      if (key.href === null && key.name === null && (el.textContent || "").trim().slice(0, 200) !== key.text) return;
      found = el;
    });
    return found;
  }

  // What each swap must restore, by its request: two polls (the run table and the counts) may
  // swap close together, and one swap's state must not be taken for the other's (the second
  // would find focus already gone with the first's old content, and the link would lose it).
  var pending = new WeakMap();

  document.addEventListener("htmx:beforeSwap", function (evt) {
    var target = evt.detail.target;
    var active = document.activeElement;
    var polled = evt.detail.requestConfig && evt.detail.requestConfig.elt && evt.detail.requestConfig.elt.hasAttribute("data-poll");
    if (!evt.detail.xhr) return;
    // A refresh already in flight when rows were ticked does not swap: it would drop the ticks
    // (a poll is held only while they are ticked when it comes due).
    if (polled && target && target.querySelector("input[data-pick]:checked")) {
      evt.detail.shouldSwap = false;
      return;
    }
    pending.set(evt.detail.xhr, {
      focus: target && active && target.contains(active) ? focusKey(active) : null,
      before: statuses(target),
      polled: !!polled,
      target: target ? target.id : "",
    });
  });

  document.addEventListener("htmx:afterSettle", function (evt) {
    var info = evt.detail.xhr ? pending.get(evt.detail.xhr) : null;
    if (evt.detail.xhr) pending.delete(evt.detail.xhr);
    var root = evt.detail.elt && document.body.contains(evt.detail.elt) ? evt.detail.elt : document;
    label(root);
    hints(root);
    if (!info) return;
    if (info.focus && (!document.activeElement || document.activeElement === document.body)) {
      var again = findAgain(info.focus);
      if (again) again.focus({ preventScroll: true });
    }
    var after = statuses(info.target ? document.getElementById(info.target) : root);
    var changed = [];
    Object.keys(after).forEach(function (k) {
      if (k in info.before && info.before[k] !== after[k]) changed.push(after[k]);
    });
    if (changed.length) {
      announce(changed.slice(0, 3).join("; ") + (changed.length > 3 ? "; and " + (changed.length - 3) + " more changed" : ""));
    } else if (!info.polled && info.target === "run-table") {
      var n = Object.keys(after).length;
      announce(n === 1 ? "1 run shown" : n + " runs shown");
    }
  });

  // Paused: every poll is held (counted, as for a hidden tab) until resumed.
  document.addEventListener("htmx:confirm", function (evt) {
    var elt = evt.detail.elt;
    if (!elt || !elt.hasAttribute || !elt.hasAttribute("data-poll") || !paused()) return;
    evt.preventDefault();
    elt.dataset.heldPolls = String((parseInt(elt.dataset.heldPolls || "0", 10) || 0) + 1);
  });

  function showLive() {
    var bar = document.getElementById("live-bar");
    var button = document.getElementById("live-pause");
    var state = document.getElementById("live-state");
    if (!bar || !button) return;
    bar.hidden = !document.querySelector("[data-poll]");
    var on = paused();
    button.setAttribute("aria-pressed", on ? "true" : "false");
    button.textContent = on ? "Resume live updates" : "Pause live updates";
    if (state) state.textContent = on ? "Live updates paused: this page shows the moment it was paused." : "Live updates on.";
  }

  function ready() {
    var summary = document.getElementById("error-summary");
    if (summary) summary.focus();
    // The messages a submit left (Django's messages, after its redirect): a live region's
    // content at load is not read out, so they are said once through the status region.
    var flash = document.getElementById("flash");
    if (flash && !summary && flash.textContent.trim()) announce(flash.textContent.trim().replace(/\s+/g, " "));
    label(document);
    hints(document);
    showLive();
    var button = document.getElementById("live-pause");
    if (button) {
      button.addEventListener("click", function () {
        var on = !paused();
        try { window.localStorage.setItem(PAUSED_KEY, on ? "1" : "0"); } catch (e) { /* private mode */ }
        showLive();
        announce(on ? "Live updates paused" : "Live updates resumed");
        if (!on && window.htmx) {
          document.querySelectorAll("[data-poll]").forEach(function (elt) { window.htmx.trigger(elt, "refresh"); });
        }
      });
    }
    var toggle = document.querySelector(".menu-toggle");
    var bar = document.getElementById("topbar");
    if (toggle && bar) {
      toggle.addEventListener("click", function () {
        var open = bar.classList.toggle("open");
        toggle.setAttribute("aria-expanded", open ? "true" : "false");
      });
    }
    var resized = null;
    window.addEventListener("resize", function () {
      window.clearTimeout(resized);
      resized = window.setTimeout(function () { hints(document); }, 200);
    });
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", ready);
  else ready();
})();
