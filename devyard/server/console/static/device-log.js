// The instance page's device log: GET {apiUrl}/logs?after=SEQ with the instance token (the
// device API takes it only in the Authorization header), polled every 2 s, appended.
(function () {
  "use strict";
  var pre = document.getElementById("device-log");
  if (!pre) return;
  var api = pre.getAttribute("data-api");
  var token = pre.getAttribute("data-token");
  pre.removeAttribute("data-token"); // the token lives in this closure only from now on
  var after = 0;
  var busy = false;

  function line(entry) {
    var when = typeof entry.time === "number" ? new Date(entry.time * 1000).toISOString().slice(11, 23) : entry.time;
    return when + " " + String(entry.level || "").toUpperCase().slice(0, 1) + " " + entry.tag + ": " + entry.message + "\n";
  }

  function poll() {
    if (busy) return;
    busy = true;
    fetch(api + "/logs?after=" + after, { headers: { Authorization: "Bearer " + token } })
      .then(function (r) { if (!r.ok) throw new Error("the device answered " + r.status); return r.json(); })
      .then(function (answer) {
        var stick = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 8;
        (answer.items || []).forEach(function (entry) {
          pre.appendChild(document.createTextNode(line(entry)));
          if (entry.seq > after) after = entry.seq;
        });
        if (stick) pre.scrollTop = pre.scrollHeight;
      })
      .catch(function (error) { pre.setAttribute("data-error", String(error.message || error)); })
      .then(function () { busy = false; });
  }
  poll();
  setInterval(poll, 2000);
})();
