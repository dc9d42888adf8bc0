// devyard console: progressive behaviour only; every page works without it (forms post).
// Loaded as an external file: the Content-Security-Policy allows no inline script.
(function () {
  "use strict";

  // Copy buttons: <button data-copy="#id-of-code-element"> or data-copy-text="...".
  document.addEventListener("click", function (event) {
    var button = event.target.closest("button[data-copy]");
    if (!button) return;
    event.preventDefault();
    var source = document.querySelector(button.getAttribute("data-copy"));
    var text = source ? (source.value !== undefined ? source.value : source.textContent) : "";
    var done = function () {
      var label = button.textContent;
      button.textContent = "Copied";
      button.setAttribute("aria-live", "polite");
      setTimeout(function () { button.textContent = label; }, 1500);
    };
    if (navigator.clipboard && window.isSecureContext) {
      navigator.clipboard.writeText(text).then(done, function () { select(source); });
    } else {
      select(source);
      try { document.execCommand("copy"); done(); } catch (e) { /* selected for manual copy */ }
    }
  });

  function select(node) {
    if (!node) return;
    if (node.select) { node.select(); return; }
    var range = document.createRange();
    range.selectNodeContents(node);
    var selection = window.getSelection();
    selection.removeAllRanges();
    selection.addRange(range);
  }

  // Confirmation for destructive buttons: <button data-confirm="Delete?">.
  document.addEventListener("click", function (event) {
    var button = event.target.closest("[data-confirm]");
    if (button && !window.confirm(button.getAttribute("data-confirm"))) event.preventDefault();
  });

  // A polled table is not refreshed while the user is selecting rows in it or typing in it.
  document.addEventListener("htmx:beforeRequest", function (event) {
    var target = event.detail && event.detail.elt;
    if (!target || !target.matches("[hx-trigger^='every']")) return;
    if (target.querySelector("input[type=checkbox]:checked") || target.contains(document.activeElement)) {
      event.preventDefault();
    }
  });

  // Live logs: <pre data-sse="/url" data-sse-event="log">: appends each event's data.
  function follow(pre) {
    if (pre.dataset.following) return;
    pre.dataset.following = "1";
    var source = new EventSource(pre.getAttribute("data-sse"));
    var status = document.getElementById(pre.getAttribute("data-status") || "");
    var append = function (text) {
      var stick = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 8;
      pre.appendChild(document.createTextNode(text));
      if (stick) pre.scrollTop = pre.scrollHeight;
    };
    source.onmessage = function (message) { append(message.data + "\n"); };
    source.addEventListener("end", function (message) {
      source.close();
      if (status) status.textContent = message.data || "ended";
    });
    source.onerror = function () {
      if (source.readyState === EventSource.CLOSED && status) status.textContent = "disconnected";
    };
    if (status) status.textContent = "live";
  }
  function init(root) {
    root.querySelectorAll("pre[data-sse]").forEach(follow);
  }
  document.addEventListener("DOMContentLoaded", function () { init(document); });
  document.addEventListener("htmx:load", function (event) { init(event.detail.elt); });
})();
