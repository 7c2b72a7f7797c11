// The job list: every job in the store, filtered and sorted in the page, refreshed every 2 s.
"use strict";

const ListPage = (() => {
  const {el} = UI;
  const COLUMNS = [["jobId", "Job"], ["state", "State"], ["backend", "Backend"], ["started", "Started"],
    ["durationSeconds", "Duration"], ["taskStates", "Tasks"]];

  function render(root) {
    UI.crumbs("jobs");
    const filter = {text: "", state: "", backend: "", trials: false};
    const sort = {key: "started", asc: false};
    let jobs = [];
    const search = el("input", {type: "search", placeholder: "filter by name", id: "filter-text"});
    const stateSel = el("select", {id: "filter-state"}, el("option", {value: ""}, "any state"));
    const backendSel = el("select", {id: "filter-backend"}, el("option", {value: ""}, "any backend"));
    const trials = el("input", {type: "checkbox", id: "filter-trials"});
    const count = el("span", {class: "muted", id: "job-count"});
    const head = el("tr", {}, COLUMNS.map(([key, label]) => el("th", {class: "sortable", "data-state": key,
      onclick: () => { sort.asc = sort.key === key ? !sort.asc : key === "jobId"; sort.key = key; draw(); }}, label)));
    const body = el("tbody", {id: "jobs-body"});
    root.replaceChildren(el("h1", {}, "Jobs"),
      el("div", {class: "filters"}, search, stateSel, backendSel,
        el("label", {}, trials, " show tuning trials"), count),
      el("table", {id: "jobs"}, el("thead", {}, head), body));
    search.addEventListener("input", () => { filter.text = search.value.toLowerCase(); draw(); });
    stateSel.addEventListener("change", () => { filter.state = stateSel.value; draw(); });
    backendSel.addEventListener("change", () => { filter.backend = backendSel.value; draw(); });
    trials.addEventListener("change", () => { filter.trials = trials.checked; draw(); });

    function options(select, values) {
      const have = new Set([...select.options].map((o) => o.value));
      for (const v of [...values].sort()) if (!have.has(v)) select.append(el("option", {value: v}, v));
    }

    function value(job, key) {
      if (key === "taskStates") return Object.values(job.taskStates).reduce((a, b) => a + b, 0);
      const v = job[key];
      return v === null || v === undefined ? -Infinity : v;
    }

    function row(job) {
      const trials = Object.keys(job.taskStates).length === 0 && Object.keys(job.trialStates).length > 0;
      const chips = el("span", {class: "chips"}, trials ? "trials: " : null,
        Object.entries(trials ? job.trialStates : job.taskStates).map(([s, n]) =>
          el("span", {class: "state s-" + s.replace(/[^A-Z]/g, ""), title: s}, s + " " + n)));
      const name = el("td", {class: "name"}, el("a", {href: UI.jobLink(job.jobId)}, job.jobId));
      if (job.isStudy) name.append(" ", el("a", {href: UI.jobLink(job.jobId, "/study"), class: "muted"}, "(study)"));
      return el("tr", {"data-state": job.state}, name, el("td", {}, UI.state(job.state)), el("td", {}, job.backend),
        el("td", {}, UI.iso(job.startTime || job.createTime)), el("td", {}, UI.duration(job.durationSeconds)),
        el("td", {}, chips));
    }

    function draw() {
      const started = performance.now();
      let shown = jobs.filter((j) => (filter.trials || !j.parentJob)
        && (!filter.text || j.jobId.toLowerCase().includes(filter.text))
        && (!filter.state || j.state === filter.state) && (!filter.backend || j.backend === filter.backend));
      const sign = sort.asc ? 1 : -1;
      shown = shown.slice().sort((a, b) => {
        const x = value(a, sort.key), y = value(b, sort.key);
        return (x < y ? -1 : x > y ? 1 : 0) * sign;
      });
      const fragment = document.createDocumentFragment();
      for (const job of shown) fragment.append(row(job));
      body.replaceChildren(fragment);
      for (const th of head.children) {
        th.classList.toggle("sorted", th.dataset.state === sort.key);
        th.classList.toggle("asc", th.dataset.state === sort.key && sort.asc);
      }
      count.textContent = shown.length + " of " + jobs.length + " jobs";
      window.tfdistTimings = Object.assign(window.tfdistTimings || {}, {renderMs: performance.now() - started});
    }

    UI.poll(async () => {
      const t0 = performance.now();
      const data = await UI.api("/api/jobs");
      const t1 = performance.now();
      jobs = data.jobs;
      options(stateSel, new Set(jobs.map((j) => j.state)));
      options(backendSel, new Set(jobs.map((j) => j.backend)));
      draw();
      const first = window.tfdistTimings.loadedAt === undefined ? {loadedAt: performance.now()} : {};
      window.tfdistTimings = Object.assign(window.tfdistTimings, {apiMs: t1 - t0}, first);
      body.setAttribute("data-state", "loaded");
    }, 2000);
  }

  return {render};
})();
