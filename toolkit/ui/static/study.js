// A tuning study: the trials table, every trial's intermediate values on one live chart (stopped
// trials dashed, each kind of trial can be hidden), the best trial, and each parameter against the
// objective. Refreshed every second.
"use strict";

const StudyPage = (() => {
  const {el} = UI;
  const COLORS = ["#2563eb", "#dc2626", "#059669", "#d97706", "#7c3aed", "#0891b2", "#db2777", "#65a30d",
    "#9333ea", "#ea580c", "#0d9488", "#4f46e5"];
  const KINDS = [["running", "running"], ["finished", "finished"], ["stopped", "stopped early"], ["failed", "failed"]];

  function kind(t) {
    if (t.isTrialStoppedEarly) return "stopped";
    if (t.state === "FAILED") return "failed";
    if (t.state === "RUNNING") return "running";
    return "finished";
  }

  // uPlot wants one x array and one y array per series, aligned: the union of the trials' steps.
  function chartData(trials) {
    const steps = [...new Set(trials.flatMap((t) => (t.allMetrics || []).map((m) => m.trainingStep)))].sort((a, b) => a - b);
    const index = new Map(steps.map((s, i) => [s, i]));
    const ys = trials.map((t) => {
      const y = new Array(steps.length).fill(null);
      for (const m of t.allMetrics || []) y[index.get(m.trainingStep)] = m.objectiveValue;
      return y;
    });
    return [steps, ...ys];
  }

  function makeChart(box, trials, tag) {
    const series = [{label: "step"}, ...trials.map((t, i) => ({
      label: "trial " + t.trialId + (t.isTrialStoppedEarly ? " (stopped)" : ""),
      stroke: COLORS[i % COLORS.length], width: 1.5, spanGaps: true, dash: t.isTrialStoppedEarly ? [6, 4] : undefined,
      points: {show: true, size: t.isTrialStoppedEarly ? 7 : 4},
    }))];
    const opts = {width: Math.max(480, box.clientWidth - 10), height: 320, series,
      scales: {x: {time: false}}, axes: [{label: "step"}, {label: tag}], legend: {live: false}};
    box.replaceChildren();
    return new uPlot(opts, chartData(trials), box);
  }

  const short = (text) => text.length > 16 ? text.slice(0, 15) + "…" : text;

  // One small scatter per parameter: the parameter's value (a category's position for text) against the objective.
  function scatter(trials, goal) {
    const scored = trials.filter((t) => t.finalMetric && t.finalMetric.objectiveValue !== null);
    if (!scored.length) return el("p", {class: "muted"}, "no trial has an objective yet");
    const names = [...new Set(scored.flatMap((t) => Object.keys(t.hyperparameters || {})))];
    const ys = scored.map((t) => t.finalMetric.objectiveValue);
    const [ylo, yhi] = [Math.min(...ys), Math.max(...ys)];
    const W = 220, H = 160, P = 28;
    return el("div", {class: "scatter", id: "scatter"}, names.map((name) => {
      const values = scored.map((t) => t.hyperparameters[name]);
      const numeric = values.every((v) => typeof v === "number");
      const cats = numeric ? [] : [...new Set(values.map(String))].sort();
      const xs = values.map((v) => numeric ? v : cats.indexOf(String(v)));
      const [xlo, xhi] = [Math.min(...xs), Math.max(...xs)];
      const sx = (x) => P + (xhi === xlo ? 0.5 : (x - xlo) / (xhi - xlo)) * (W - 2 * P);
      const sy = (y) => H - P - (yhi === ylo ? 0.5 : (y - ylo) / (yhi - ylo)) * (H - 2 * P);
      const svg = el("svg", {svg: true, width: W, height: H, viewBox: `0 0 ${W} ${H}`},
        el("line", {svg: true, x1: P, y1: H - P, x2: W - P, y2: H - P, stroke: "#9ca3af"}),
        el("line", {svg: true, x1: P, y1: P, x2: P, y2: H - P, stroke: "#9ca3af"}),
        el("text", {svg: true, x: P, y: H - 8, "font-size": 10}, numeric ? UI.num(xlo) : short(cats[0])),
        el("text", {svg: true, x: W - P, y: H - 8, "font-size": 10, "text-anchor": "end"}, numeric ? UI.num(xhi) : short(cats[cats.length - 1])),
        el("text", {svg: true, x: 2, y: P - 6, "font-size": 10}, UI.num(yhi)),
        el("text", {svg: true, x: 2, y: H - P + 12, "font-size": 10}, UI.num(ylo)),
        scored.map((t, i) => el("circle", {svg: true, cx: sx(xs[i]), cy: sy(ys[i]), r: 4,
          fill: t.isTrialStoppedEarly ? "none" : "#2563eb", stroke: "#2563eb"},
          el("title", {svg: true}, "trial " + t.trialId + ": " + name + "=" + values[i] + ", objective " + UI.num(ys[i])))));
      return el("figure", {}, svg, el("figcaption", {}, name + " vs " + goal.toLowerCase() + "d objective"));
    }));
  }

  function trialsTable(trials, name) {
    const params = [...new Set(trials.flatMap((t) => Object.keys(t.hyperparameters || {})))];
    return UI.table(["trial", "state", "objective", "stopped early", "duration", ...params, "note"],
      trials.map((t) => el("tr", {"data-task": String(t.trialId), "data-state": kind(t)},
        el("td", {}, t.job ? el("a", {href: UI.jobLink(t.job)}, String(t.trialId)) : String(t.trialId)),
        el("td", {}, UI.state(t.state)), el("td", {}, UI.num(t.finalMetric ? t.finalMetric.objectiveValue : null)),
        el("td", {}, t.isTrialStoppedEarly ? "yes, at step " + t.stoppedAtStep : "no"),
        el("td", {}, UI.duration(t.durationSeconds)),
        params.map((p) => el("td", {class: "name"}, t.hyperparameters[p] === undefined ? "-" : String(t.hyperparameters[p]))),
        el("td", {class: "name"}, t.resumedFrom ? "from " + t.resumedFrom : (t.error || t.warning || "")))));
  }

  function render(root, name) {
    UI.crumbs(["jobs", "/"], [name, UI.jobLink(name)], "study");
    const head = el("div");
    const best = el("div", {id: "best"});
    const filters = el("div", {class: "filters", id: "chart-filters"});
    const chartBox = el("div", {id: "chart"});
    const scatterBox = el("div");
    const tableBox = el("div", {id: "trials"});
    root.replaceChildren(head, best, el("h2", {}, "Intermediate values"), filters, chartBox,
      el("h2", {}, "Parameters against the objective"), scatterBox, el("h2", {}, "Trials"), tableBox);
    const shown = {running: true, finished: true, stopped: true, failed: true};
    let chart = null, ids = "", trials = [];
    filters.append(...KINDS.map(([k, label]) => el("label", {}, el("input", {type: "checkbox", checked: true, name: k,
      onchange: (e) => { shown[k] = e.target.checked; applyFilter(); }}), " " + label)));

    function applyFilter() {
      if (!chart) return;
      trials.forEach((t, i) => chart.setSeries(i + 1, {show: shown[kind(t)]}));
    }

    UI.poll(async () => {
      const s = await UI.api("/api/jobs/" + encodeURIComponent(name) + "/trials");
      trials = s.trials.slice().sort((a, b) => Number(a.trialId) - Number(b.trialId));
      head.replaceChildren(el("h1", {}, name, " ", UI.state(s.state)), el("p", {id: "summary"},
        `${s.goal} ${s.hyperparameterMetricTag}: ${s.completedTrialCount} succeeded (${s.stoppedEarlyTrialCount} stopped early), ` +
        `${s.failedTrialCount} failed, ${s.runningTrialCount} running`));
      const b = s.bestTrial;
      best.replaceChildren(b ? el("div", {class: "best"}, el("strong", {}, "Best trial " + b.trialId + ": "),
        UI.num(b.finalMetric.objectiveValue) + "  ", Object.entries(b.hyperparameters || {}).map(([k, v]) => k + "=" + v).join(", "))
        : el("p", {class: "muted"}, "no best trial yet"));
      const key = trials.map((t) => t.trialId + ":" + t.isTrialStoppedEarly).join(",");
      if (!chart || key !== ids) { chart = makeChart(chartBox, trials, s.hyperparameterMetricTag); ids = key; }
      else chart.setData(chartData(trials));
      applyFilter();
      window.tfdistChart = {chart, trials: trials.map((t) => t.trialId)};  // what the browser test reads
      scatterBox.replaceChildren(scatter(trials, s.goal));
      tableBox.replaceChildren(trialsTable(s.bestTrial ? s.trials : trials, name));
      document.body.setAttribute("data-state", s.state);
    }, 1000);
  }

  return {render};
})();
