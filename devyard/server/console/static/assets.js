// Assets page: drag and drop upload with progress. The page posts the record's name (the
// console upserts it through the API and answers its signed upload URL), then PUTs the
// bytes straight to that URL with XHR, whose upload progress events move the bar.
(function () {
  "use strict";
  function ready() {
    var form = document.getElementById("upload-form");
    if (!form) return;
    var zone = document.getElementById("dropzone");
    var input = document.getElementById("file");
    var nameInput = document.getElementById("name");
    var status = document.getElementById("upload-status");
    var bar = document.getElementById("upload-progress");
    var percent = document.getElementById("upload-percent");
    var label = document.getElementById("upload-label");
    var error = document.getElementById("upload-error");
    var button = document.getElementById("upload-button");

    function show(value) {
      bar.value = value;
      percent.textContent = value + " %";
    }
    function fail(message) {
      error.textContent = message;
      error.hidden = false;
      button.disabled = false;
    }
    function upload(file) {
      error.hidden = true;
      button.disabled = true;
      var fields = new FormData(form);
      fields.delete("file");
      if (!fields.get("name")) fields.set("name", file.name);
      status.hidden = false;
      label.textContent = "Uploading " + fields.get("name");
      show(0);
      fetch(form.action, {
        method: "POST",
        body: new URLSearchParams(fields),
        headers: { Accept: "application/json" },
        credentials: "same-origin"
      }).then(function (response) {
        return response.json().then(function (body) {
          if (!response.ok) throw new Error(body.message || "refused (" + response.status + ")");
          return body;
        });
      }).then(function (asset) {
        var xhr = new XMLHttpRequest();
        xhr.open("PUT", asset.signedUploadUrl);
        xhr.setRequestHeader("Content-Type", "application/octet-stream");
        xhr.upload.addEventListener("progress", function (event) {
          if (event.lengthComputable) show(Math.floor((event.loaded / event.total) * 100));
        });
        xhr.addEventListener("load", function () {
          if (xhr.status >= 200 && xhr.status < 300) {
            show(100);
            label.textContent = "Uploaded " + asset.name;
            button.disabled = false;
            input.value = "";
            if (nameInput) nameInput.value = "";
            if (window.htmx) window.htmx.trigger("#assets-table", "refresh");
          } else {
            var message = "the upload was refused (" + xhr.status + ")";
            try { message = JSON.parse(xhr.responseText).message || message; } catch (e) { /* not JSON */ }
            fail(message);
          }
        });
        xhr.addEventListener("error", function () { fail("the upload failed: network error"); });
        xhr.send(file);
      }).catch(function (problem) { fail(problem.message); });
    }

    form.addEventListener("submit", function (event) {
      if (!input.files || !input.files.length) return;  // no file: the plain post
      event.preventDefault();
      upload(input.files[0]);
    });
    input.addEventListener("change", function () {
      if (input.files && input.files.length) upload(input.files[0]);
    });
    ["dragenter", "dragover"].forEach(function (type) {
      zone.addEventListener(type, function (event) {
        event.preventDefault();
        zone.classList.add("over");
      });
    });
    ["dragleave", "drop"].forEach(function (type) {
      zone.addEventListener(type, function () { zone.classList.remove("over"); });
    });
    zone.addEventListener("drop", function (event) {
      event.preventDefault();
      var files = event.dataTransfer && event.dataTransfer.files;
      if (files && files.length) upload(files[0]);
    });
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", ready);
  else ready();
})();
