// Usage page: draws the two uPlot charts (billed minutes, instances) from the usage table's
// data-* attributes: one line per platform and region, one point per bucket.
(function () {
  "use strict";
  var COLOURS = ["#0a58ca", "#b42318", "#136c2e", "#8a5a00", "#6f42c1", "#0e7490", "#9d174d", "#374151"];

  function collect(table) {
    var starts = (table.getAttribute("data-buckets") || "").split(" ").filter(Boolean);
    var index = {};
    starts.forEach(function (start, i) { index[start] = i; });
    var names = [];
    var byName = {};
    table.querySelectorAll("tbody tr[data-series]").forEach(function (row) {
      var name = row.getAttribute("data-series");
      if (!byName[name]) {
        byName[name] = { minutes: starts.map(function () { return 0; }), instances: starts.map(function () { return 0; }) };
        names.push(name);
      }
      var at = index[row.getAttribute("data-start")];
      if (at === undefined) return;
      byName[name].minutes[at] += Number(row.getAttribute("data-minutes"));
      byName[name].instances[at] += Number(row.getAttribute("data-instances"));
    });
    var xs = starts.map(function (start) { return Date.parse(start) / 1000; });
    return { xs: xs, names: names, byName: byName };
  }

  function draw(node, field, data) {
    var series = [{}];
    var columns = [data.xs];
    data.names.forEach(function (name, i) {
      series.push({ label: name, stroke: COLOURS[i % COLOURS.length], width: 2, points: { show: true, size: 6 } });
      columns.push(data.byName[name][field]);
    });
    if (data.names.length === 0) {
      series.push({ label: "none", stroke: "#8c959f" });
      columns.push(data.xs.map(function () { return 0; }));
    }
    var width = Math.max(260, node.clientWidth);
    var chart = new window.uPlot({
      width: width,
      height: 240,
      series: series,
      scales: { y: { range: function (u, min, max) { return [0, Math.max(1, max)]; } } },
      axes: [{}, { label: field === "minutes" ? "minutes" : "instances" }]
    }, columns, node);
    node.dataset.points = String(data.names.reduce(function (sum, name) {
      return sum + data.byName[name][field].filter(function (v) { return v > 0; }).length;
    }, 0));
    node.dataset.series = String(data.names.length);
    return chart;
  }

  function ready() {
    var table = document.getElementById("usage-table");
    if (!table || !window.uPlot) return;
    var data = collect(table);
    var charts = [];
    document.querySelectorAll(".chart[data-field]").forEach(function (node) {
      charts.push([node, draw(node, node.getAttribute("data-field"), data)]);
    });
    window.addEventListener("resize", function () {
      charts.forEach(function (pair) { pair[1].setSize({ width: Math.max(260, pair[0].clientWidth), height: 240 }); });
    });
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", ready);
  else ready();
})();
