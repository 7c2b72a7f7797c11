// One job: its facts, tasks, the chief's latest metrics, each task's log streaming live, the spec.
"use strict";

const JobPage = (() => {
  const {el} = UI;
  const MAX_LINES = 5000;

  function facts(doc) {
    const v = doc.view;
    const pairs = [["state", UI.state(doc.state)], ["backend", doc.backend], ["created", UI.iso(doc.createTime)],
      ["started", UI.iso(doc.startTime)], ["ended", UI.iso(doc.endTime)], ["duration", UI.duration(v.durationSeconds)],
      ["exit code", doc.exitCode === null ? "-" : String(doc.exitCode)], ["job dir", doc.jobDir || "-"],
      ["output dir", v.outputDir || "-"]];
    if (doc.parentJob) pairs.push(["tuning job", el("a", {href: UI.jobLink(doc.parentJob, "/study")}, doc.parentJob)]);
    if (doc.errorMessage) pairs.push(["error", el("span", {class: "err"}, doc.errorMessage)]);
    return el("dl", {class: "facts", id: "facts"}, pairs.flatMap(([k, val]) => [el("dt", {}, k), el("dd", {}, val)]));
  }

  function tasks(doc) {
    return UI.table(["task", "role", "node / pid", "state", "exit code", "restarts", "preemptions", "reason"],
      doc.view.tasks.map((t) => el("tr", {"data-task": t.name}, el("td", {}, t.name), el("td", {}, t.role),
        el("td", {}, t.node ? t.node + (t.address ? " (" + t.address + ")" : "") : (t.pid ? "pid " + t.pid : "-")),
        el("td", {}, UI.state(t.state)), el("td", {}, t.exitCode === null ? "-" : String(t.exitCode)),
        el("td", {}, String(t.restarts)), el("td", {}, String(t.preemptions)), el("td", {class: "name"}, t.reason || ""))));
  }

  // The log viewer: a tab per log; the open one streams (EventSource reconnects by itself and resumes
  // at the last byte offset it saw, so nothing is lost or shown twice).
  function logs(name, box) {
    const tabs = el("div", {class: "tabs", id: "log-tabs"});
    const status = el("div", {class: "logstatus", id: "log-status"});
    const pre = el("pre", {class: "log", id: "log"});
    box.replaceChildren(tabs, status, pre);
    let source = null;
    let current = null;
    const known = new Set();

    function open(task) {
      if (source) source.close();
      current = task;
      for (const b of tabs.children) b.classList.toggle("on", b.dataset.task === task);
      pre.replaceChildren();
      status.textContent = "streaming " + task + "…";
      source = new EventSource("/api/jobs/" + encodeURIComponent(name) + "/logs/" + encodeURIComponent(task) + "/stream");
      source.addEventListener("lines", (event) => {
        UI.setConnected(true);
        const data = JSON.parse(event.data);
        const stick = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 8;
        pre.append(document.createTextNode(data.lines.map(UI.visible).join("\n") + (data.lines.length ? "\n" : "")));
        while (pre.childNodes.length > MAX_LINES / 10) pre.firstChild.remove();
        if (stick) pre.scrollTop = pre.scrollHeight;
        status.textContent = task + ": " + data.offset + " bytes read, following";
      });
      source.addEventListener("end", () => { status.textContent = task + ": the job has ended; end of log"; source.close(); });
      source.onerror = () => { if (source.readyState !== EventSource.CLOSED) status.textContent = task + ": reconnecting…"; };
    }

    return async function refresh() {
      const data = await UI.api("/api/jobs/" + encodeURIComponent(name) + "/logs");
      for (const entry of data.logs) {
        if (known.has(entry.task)) continue;
        known.add(entry.task);
        tabs.append(el("button", {"data-task": entry.task, onclick: () => open(entry.task)}, entry.task));
      }
      if (current === null && data.logs.length) {
        const first = data.logs.find((l) => /^(master|chief)-/.test(l.task)) || data.logs[0];
        open(first.task);
      }
      if (!data.logs.length) status.textContent = "no log yet";
    };
  }

  function metrics(m) {
    const rows = m.scalars.map((s) => el("tr", {}, el("td", {}, s.run ? s.run + "/" + s.tag : s.tag),
      el("td", {}, String(s.step)), el("td", {}, UI.num(s.value)), el("td", {}, UI.iso(s.time))));
    return [m.scalars.length ? UI.table(["scalar", "step", "value", "written"], rows)
      : el("p", {class: "muted"}, "no TensorBoard scalars under the output dir yet"),
      m.tensorboard ? el("p", {}, "Open TensorBoard: ", el("code", {id: "tb-command"}, m.tensorboard)) : null];
  }

  function render(root, name) {
    UI.crumbs(["jobs", "/"], name);
    const head = el("div", {id: "head"});
    const factsBox = el("div");
    const tasksBox = el("div", {id: "tasks"});
    const metricsBox = el("div", {id: "metrics"});
    const logBox = el("div");
    const specBox = el("pre", {class: "spec", id: "spec"});
    const historyBox = el("div");
    root.replaceChildren(head, factsBox, el("h2", {}, "Tasks"), tasksBox,
      el("div", {class: "row"}, el("section", {}, el("h2", {}, "Logs"), logBox),
        el("section", {}, el("h2", {}, "Chief's latest metrics"), metricsBox)),
      el("h2", {}, "History"), historyBox, el("h2", {}, "Spec"), specBox);
    const refreshLogs = logs(name, logBox);
    let config = {};
    UI.api("/api/config").then((c) => { config = c; });

    UI.poll(async () => {
      const doc = await UI.api("/api/jobs/" + encodeURIComponent(name));
      const links = [];
      if (doc.view.isStudy) links.push(el("a", {href: UI.jobLink(name, "/study")}, "study: trials and curves"));
      if (!["SUCCEEDED", "FAILED", "CANCELLED"].includes(doc.state)) links.push(el("a", {href: UI.jobLink(name, "/stuck")}, "Why is it stuck?"));
      const cancel = config.allowCancel && !["SUCCEEDED", "FAILED", "CANCELLED", "CANCELLING"].includes(doc.state)
        ? el("button", {class: "act danger", id: "cancel", onclick: async () => {
          if (confirm("Cancel job " + name + "?")) await UI.api("/api/jobs/" + encodeURIComponent(name) + "/cancel", {method: "POST"});
        }}, "Cancel job") : null;
      head.replaceChildren(el("h1", {id: "job-name"}, name, " ", UI.state(doc.state)),
        el("p", {}, links.flatMap((l) => [l, "  "]), cancel));
      factsBox.replaceChildren(facts(doc), ...(doc.warnings.length ? [el("h2", {}, "Warnings"),
        el("ul", {}, doc.warnings.map((w) => el("li", {}, w)))] : []));
      tasksBox.replaceChildren(doc.view.tasks.length ? tasks(doc) : el("p", {class: "muted"}, "no task has started"));
      historyBox.replaceChildren(UI.table(["time", "state", "message"], doc.history.map((h) =>
        el("tr", {}, el("td", {}, UI.iso(h.time)), el("td", {}, UI.state(h.state)), el("td", {class: "name"}, h.message || "")))));
      const spec = {trainingInput: doc.trainingInput, labels: doc.labels};
      specBox.textContent = UI.visible(JSON.stringify(spec, null, 2));
      await refreshLogs();
      metricsBox.replaceChildren(...metrics(await UI.api("/api/jobs/" + encodeURIComponent(name) + "/metrics")));
      document.body.setAttribute("data-state", doc.state);
    }, 1000);
  }

  return {render};
})();
