// "Why is it stuck?": how long each task has been quiet, and every running task's Python stack on demand.
"use strict";

const StuckPage = (() => {
  const {el} = UI;

  function progress(p) {
    return UI.table(["task", "state", "last log line", "chief's last step", "quiet for", ""],
      p.tasks.map((t) => el("tr", {class: t.stalled ? "stalled" : "", "data-task": t.task},
        el("td", {}, t.task), el("td", {}, UI.state(t.state)), el("td", {}, UI.iso(t.lastOutput)),
        el("td", {}, t.lastStep === undefined ? "-" : t.lastStep + " at " + UI.iso(t.lastStepTime)),
        el("td", {}, t.quietSeconds === null ? "never spoke" : UI.duration(t.quietSeconds)),
        el("td", {}, t.stalled ? "no progress for over " + UI.duration(p.stallAfterSeconds) : ""))));
  }

  function stacks(data) {
    return el("div", {class: "stacks", id: "stack-columns"}, data.tasks.map((t) => el("article", {"data-task": t.task},
      el("h3", {}, t.task, " ", UI.state(t.state), t.pid ? " pid " + t.pid : ""),
      t.stack ? el("pre", {}, t.stack) : el("p", {class: "err"}, t.error))));
  }

  function render(root, name) {
    UI.crumbs(["jobs", "/"], [name, UI.jobLink(name)], "why is it stuck?");
    const progressBox = el("div", {id: "progress"});
    const stackBox = el("div", {id: "stacks"});
    const when = el("span", {class: "muted"});
    const button = el("button", {class: "act", id: "dump", onclick: async () => {
      button.disabled = true;
      when.textContent = " reading stacks…";
      try {
        const data = await UI.api("/api/jobs/" + encodeURIComponent(name) + "/stacks", {method: "POST"});
        stackBox.replaceChildren(stacks(data));
        when.textContent = " read at " + new Date(data.time * 1000).toLocaleTimeString();
      } catch (err) {
        when.textContent = " " + err.message;
      } finally {
        button.disabled = false;
      }
    }}, "Show every task's Python stack");
    root.replaceChildren(el("h1", {}, "Why is " + name + " stuck?"),
      el("p", {class: "muted"}, "A task is quiet when it has written no log line (the chief: no TensorBoard step) for a while."),
      progressBox, el("h2", {}, "Stacks"), el("p", {}, button, when), stackBox);
    UI.poll(async () => {
      const p = await UI.api("/api/jobs/" + encodeURIComponent(name) + "/progress");
      progressBox.replaceChildren(el("p", {}, "job ", UI.state(p.state)), progress(p));
      document.body.setAttribute("data-state", p.state);
    }, 2000);
  }

  return {render};
})();
