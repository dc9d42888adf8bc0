// The builds page's live part: the instance's execs (GET {apiUrl}/exec, instance token) and
// each running exec's event stream (GET {apiUrl}/exec/{id}/events?token=, docs/builds.md).
(function () {
  "use strict";
  var root = document.getElementById("live-execs");
  if (!root) return;
  var api = root.getAttribute("data-api");
  var token = root.getAttribute("data-token");
  root.removeAttribute("data-token"); // the token lives in this closure only from now on
  var shown = {};

  function el(tag, cls, text) {
    var node = document.createElement(tag);
    if (cls) node.className = cls;
    if (text !== undefined) node.textContent = text;
    return node;
  }

  function block(exec) {
    var box = el("section", "card exec");
    box.id = "exec-" + exec.execId;
    var head = el("h3", "", exec.command + " ");
    head.appendChild(el("code", "", exec.execId));
    var status = el("p", "exec-status", exec.status);
    status.setAttribute("data-role", "status");
    var log = el("pre", "log");
    log.setAttribute("tabindex", "0");
    log.setAttribute("aria-label", "Log of " + exec.execId);
    var artifacts = el("ul", "artifacts");
    box.appendChild(head);
    box.appendChild(status);
    box.appendChild(log);
    box.appendChild(el("h4", "", "Artifacts"));
    box.appendChild(artifacts);
    return { box: box, status: status, log: log, artifacts: artifacts };
  }

  function append(log, text) {
    var stick = log.scrollTop + log.clientHeight >= log.scrollHeight - 8;
    log.appendChild(document.createTextNode(text + "\n"));
    if (stick) log.scrollTop = log.scrollHeight;
  }

  function artifact(list, a) {
    list.appendChild(el("li", "", (a.name || a.path) + " (" + a.size + " B)"));
  }

  // The event stream, read with fetch: the instance's HTTP API takes its token only in the
  // Authorization header, which an EventSource cannot send.
  function follow(exec, parts) {
    var url = api + "/exec/" + encodeURIComponent(exec.execId) + "/events";
    parts.status.textContent = "RUNNING · live";
    var handlers = {
      command: function (data) { append(parts.log, "$ " + data); },
      stdout: function (data) { append(parts.log, data); },
      stderr: function (data) { append(parts.log, data); },
      artifact: function (data) {
        try { artifact(parts.artifacts, JSON.parse(data)); } catch (e) { /* not JSON */ }
      },
      exitCode: function (data) { parts.status.textContent = "ended · exit code " + data; },
    };
    fetch(url, { headers: { Authorization: "Bearer " + token, Accept: "text/event-stream" } })
      .then(function (response) {
        if (!response.ok || !response.body) throw new Error("the stream answered " + response.status);
        var reader = response.body.getReader();
        var decoder = new TextDecoder();
        var buffer = "";
        function dispatch(block) {
          var type = "message", data = [];
          block.split("\n").forEach(function (line) {
            if (line.indexOf("event:") === 0) type = line.slice(6).trim();
            else if (line.indexOf("data:") === 0) data.push(line.slice(5).replace(/^ /, ""));
          });
          if (data.length && handlers[type]) handlers[type](data.join("\n"));
        }
        function pump() {
          return reader.read().then(function (chunk) {
            if (chunk.done) return;
            buffer += decoder.decode(chunk.value, { stream: true }).replace(/\r\n?/g, "\n");
            var cut;
            while ((cut = buffer.indexOf("\n\n")) >= 0) {
              dispatch(buffer.slice(0, cut));
              buffer = buffer.slice(cut + 2);
            }
            return pump();
          });
        }
        return pump();
      })
      .catch(function (error) { parts.status.textContent = String(error.message || error); });
  }

  function ended(exec, parts) {
    parts.status.textContent = exec.status + (exec.exitCode !== undefined ? " · exit code " + exec.exitCode : "");
    (exec.artifacts || []).forEach(function (a) { artifact(parts.artifacts, a); });
    fetch(api + "/exec/" + encodeURIComponent(exec.execId) + "/log", {
      headers: { Authorization: "Bearer " + token },
    }).then(function (r) { return r.ok ? r.text() : ""; }).then(function (text) {
      parts.log.textContent = text;
    });
  }

  function refresh() {
    fetch(api + "/exec", { headers: { Authorization: "Bearer " + token } })
      .then(function (r) { if (!r.ok) throw new Error("the instance answered " + r.status); return r.json(); })
      .then(function (answer) {
        var status = document.getElementById("live-status");
        var items = answer.items || [];
        if (status) status.textContent = items.length ? "" : "No execs yet; this list follows new ones.";
        items.forEach(function (exec) {
          if (shown[exec.execId]) return;
          var parts = block(exec);
          shown[exec.execId] = parts;
          root.insertBefore(parts.box, root.firstChild);
          if (exec.status === "RUNNING") follow(exec, parts); else ended(exec, parts);
        });
      })
      .catch(function (error) {
        var status = document.getElementById("live-status");
        if (status) status.textContent = String(error.message || error);
      });
  }
  refresh();
  setInterval(refresh, 3000);
})();
