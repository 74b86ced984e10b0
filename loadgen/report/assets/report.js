// loadgen's HTML report: draws one Chart.js chart per entry of the embedded data (id "loadgen-data"). The data and the
// library are both in this file: nothing is loaded from elsewhere when the page is viewed.
(function () {
  "use strict";
  var data = JSON.parse(document.getElementById("loadgen-data").textContent);

  // A dashed reference line at a value of one axis (speedup 1.0 in the comparison chart).
  Chart.register({
    id: "loadgenRefLine",
    afterDatasetsDraw: function (chart, args, opts) {
      if (!opts || opts.value === undefined || opts.value === null) return;
      var axis = opts.axis || "x", scale = chart.scales[axis], area = chart.chartArea, ctx = chart.ctx;
      if (!scale) return;
      var at = scale.getPixelForValue(opts.value);
      ctx.save();
      ctx.strokeStyle = "#444";
      ctx.setLineDash([5, 4]);
      ctx.beginPath();
      if (axis === "x") { ctx.moveTo(at, area.top); ctx.lineTo(at, area.bottom); }
      else { ctx.moveTo(area.left, at); ctx.lineTo(area.right, at); }
      ctx.stroke();
      ctx.restore();
    }
  });
  // Drawn at once: a report is read, not watched, and a static first frame is what a headless check sees.
  Chart.defaults.animation = false;
  Chart.defaults.maintainAspectRatio = false;

  function label(item) {
    var ds = item.dataset, extra = ds.pointLabels ? ds.pointLabels[item.dataIndex] : null;
    return (ds.label || "") + ": " + item.formattedValue + (extra ? " (" + extra + ")" : "");
  }

  var drawn = [], failed = [];
  data.charts.forEach(function (spec) {
    var canvas = document.getElementById(spec.id);
    try {
      var options = spec.config.options = spec.config.options || {};
      var plugins = options.plugins = options.plugins || {};
      plugins.tooltip = { callbacks: { label: label } };
      drawn.push(new Chart(canvas, spec.config));
    } catch (e) {
      failed.push(spec.id + ": " + e);
      canvas.parentNode.insertAdjacentText("afterend", "This chart could not be drawn: " + e);
    }
  });
  window.loadgenCharts = drawn;
  window.loadgenChartErrors = failed;
  document.body.setAttribute("data-charts-drawn", String(drawn.length));
})();
