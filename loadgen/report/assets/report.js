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

  // Tick labels that never collide. Chart.js's log-axis labels follow the mantissas 1, 2, 3, 5, 10, 15 and then
  // every tick of the last fifth, so the top end printed "5,0006,000". Here a log axis offers labels at 1, 2 and 5
  // times a power of ten only (every tick when that leaves fewer than three), unrotated and unskipped (its ticks are
  // not evenly spaced, so skipping every other one would drop the decades). Once the chart is laid out, any axis
  // drops each label that would touch one kept before it: a log axis keeps the decades first, then 5s, then 2s.
  var GAP = 4;  // pixels kept between two labels
  function significand(v) { return v / Math.pow(10, Math.floor(Math.log10(v) + 1e-9)); }
  function near(a, b) { return Math.abs(a - b) < 1e-6; }
  function logRank(v) {
    var s = significand(v);
    return near(s, 1) || near(s, 10) ? 0 : near(s, 5) ? 1 : near(s, 2) ? 2 : 3;
  }
  function logLabel(value, index, ticks) {
    var nice = ticks.filter(function (t) { return t.value > 0 && logRank(t.value) < 3; }).length;
    if (value <= 0 || (nice >= 3 && logRank(value) === 3)) return "";
    return Chart.Ticks.formatters.numeric.call(this, value, index, ticks);
  }
  function logAxes(options) {
    Object.keys(options.scales || {}).forEach(function (id) {
      var axis = options.scales[id];
      if (axis.type !== "logarithmic") return;
      axis.ticks = Object.assign({ callback: logLabel, autoSkip: false, maxRotation: 0 }, axis.ticks || {});
    });
  }
  Chart.register({
    id: "loadgenTickLabels",
    afterLayout: function (chart) {
      Object.keys(chart.scales).forEach(function (id) {
        var scale = chart.scales[id];
        if (!scale.options.display || !scale.options.ticks.display) return;
        var font = Chart.helpers.toFont(scale.options.ticks.font), ctx = chart.ctx;
        var rotation = (scale.labelRotation || 0) * Math.PI / 180;
        ctx.save();
        ctx.font = font.string;
        var items = [];
        scale.ticks.forEach(function (tick, i) {
          var text = Array.isArray(tick.label) ? tick.label.join(" ") : tick.label;
          if (text === undefined || text === null || text === "") return;
          var size = scale.isHorizontal() && !rotation ? ctx.measureText(String(text)).width : font.lineHeight;
          if (rotation) size = size / Math.sin(rotation);
          var rank = scale.type === "logarithmic" && tick.value > 0 ? logRank(tick.value) : 0;
          items.push({ tick: tick, at: scale.getPixelForTick(i), size: size, rank: rank, order: i });
        });
        ctx.restore();
        items.sort(function (a, b) { return a.rank - b.rank || a.order - b.order; });
        var kept = [], dropped = 0;
        items.forEach(function (it) {
          var clear = kept.every(function (k) { return Math.abs(k.at - it.at) >= (k.size + it.size) / 2 + GAP; });
          if (clear) kept.push(it);
          else { it.tick.label = ""; dropped++; }
        });
        if (dropped) scale._labelItems = null;  // computed again from the labels left, when the axis is drawn
      });
    }
  });

  function label(item) {
    var ds = item.dataset, extra = ds.pointLabels ? ds.pointLabels[item.dataIndex] : null;
    return (ds.label || "") + ": " + item.formattedValue + (extra ? " (" + extra + ")" : "");
  }

  // One chart as the report draws it: log axes labelled as above, tooltips with each point's own label.
  function draw(canvas, config) {
    var options = config.options = config.options || {};
    logAxes(options);
    var plugins = options.plugins = options.plugins || {};
    plugins.tooltip = { callbacks: { label: label } };
    return new Chart(canvas, config);
  }
  window.loadgenDraw = draw;

  var drawn = [], failed = [];
  data.charts.forEach(function (spec) {
    var canvas = document.getElementById(spec.id);
    try {
      drawn.push(draw(canvas, spec.config));
    } catch (e) {
      failed.push(spec.id + ": " + e);
      canvas.parentNode.insertAdjacentText("afterend", "This chart could not be drawn: " + e);
    }
  });
  window.loadgenCharts = drawn;
  window.loadgenChartErrors = failed;
  document.body.setAttribute("data-charts-drawn", String(drawn.length));
})();
