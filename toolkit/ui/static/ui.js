// The dashboard's shared helpers. Every piece of data reaches the page as text (textContent,
// setAttribute on a fixed list of attributes), never as HTML: a job name, a log line or a trial
// parameter that holds markup or terminal escapes is shown as the characters it is.
"use strict";

const UI = (() => {
  const banner = () => document.getElementById("banner");
  const conn = () => document.getElementById("conn");

  // Control characters (ANSI colour codes start with ESC) are made visible: "\x1b[31m".
  function visible(value) {
    return String(value).replace(/[\x00-\x08\x0b-\x1f\x7f]/g,
      (c) => "\\x" + c.charCodeAt(0).toString(16).padStart(2, "0"));
  }

  const ATTRS = new Set(["class", "href", "title", "type", "value", "checked", "id", "colspan", "data-task",
    "data-state", "placeholder", "for", "name", "hidden", "width", "height", "viewBox", "cx", "cy", "r",
    "x", "y", "x1", "x2", "y1", "y2", "fill", "stroke", "stroke-width", "font-size", "text-anchor"]);

  // el("td", {class: "name"}, "text", childNode, ...): strings become text nodes.
  function el(tag, props, ...children) {
    const svg = ["svg", "circle", "line", "text", "g", "title", "rect"].includes(tag) && props && props.svg;
    const node = svg ? document.createElementNS("http://www.w3.org/2000/svg", tag) : document.createElement(tag);
    for (const [key, value] of Object.entries(props || {})) {
      if (key === "svg" || value === undefined || value === null || value === false) continue;
      if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
      else if (key === "text") node.textContent = visible(value);
      else if (ATTRS.has(key)) {
        if (key === "href" && !String(value).startsWith("/")) throw new Error("only local links");
        node.setAttribute(key, value === true ? "" : String(value));
      } else throw new Error("attribute not allowed: " + key);
    }
    for (const child of children.flat()) {
      if (child === null || child === undefined) continue;
      node.append(child instanceof Node ? child : document.createTextNode(visible(child)));
    }
    return node;
  }

  function setConnected(ok) {
    const c = conn();
    if (!c) return;
    c.className = "conn " + (ok ? "ok" : "lost");
    c.textContent = ok ? "live" : "reconnecting…";
  }

  function showBanner(text, kind) {
    const b = banner();
    b.hidden = !text;
    b.className = kind || "";
    b.textContent = text ? visible(text) : "";
  }

  class ApiError extends Error {
    constructor(status, body) { super(body.error || ("HTTP " + status)); this.status = status; this.body = body; }
  }

  // fetch + JSON; a network failure marks the page "reconnecting" until a request succeeds again.
  async function api(path, options) {
    let response;
    try {
      response = await fetch(path, Object.assign({credentials: "same-origin", cache: "no-store"}, options || {}));
    } catch (err) {
      setConnected(false);
      throw err;
    }
    setConnected(true);
    const body = await response.json().catch(() => ({}));
    if (!response.ok) throw new ApiError(response.status, body);
    return body;
  }

  // Calls fn every `ms`; after a failure it waits longer (up to 3 s) and tries again, for ever.
  function poll(fn, ms) {
    let stopped = false;
    let delay = ms;
    async function tick() {
      if (stopped) return;
      try {
        const again = await fn();
        delay = ms;
        if (banner().className === "wait") showBanner("");
        if (again === false) return;
      } catch (err) {
        if (err instanceof ApiError && (err.status === 401 || err.body.kind === "not-found"
            || err.body.kind === "invalid-name")) { handleGone(err); return; }  // nothing will change that
        if (err instanceof ApiError) showBanner(err.message, "wait");  // e.g. a study not started yet
        delay = Math.min(3000, delay * 2);
      }
      setTimeout(tick, delay);
    }
    tick();
    return () => { stopped = true; };
  }

  function handleGone(err) {
    if (err.status === 404 && err.body.kind === "not-found") {
      showBanner("This job is not in the job store (deleted, or never there). " + err.message, "gone");
    } else if (err.status === 401) {
      showBanner("The session's token is no longer valid: open the URL that `tfdist ui` printed.", "gone");
    } else {
      showBanner(err.message, "gone");
    }
  }

  function iso(t) { return t ? t.replace("T", " ").replace("Z", "") : "-"; }
  function duration(s) {
    if (s === null || s === undefined) return "-";
    if (s < 60) return s.toFixed(1) + "s";
    if (s < 3600) return Math.floor(s / 60) + "m" + String(Math.round(s % 60)).padStart(2, "0") + "s";
    return Math.floor(s / 3600) + "h" + String(Math.floor((s % 3600) / 60)).padStart(2, "0") + "m";
  }
  function num(v) { return v === null || v === undefined ? "-" : (Math.abs(v) >= 1e4 || (v !== 0 && Math.abs(v) < 1e-3)) ? v.toExponential(3) : String(+v.toPrecision(6)); }
  function state(s) { return el("span", {class: "state s-" + String(s).replace(/[^A-Z]/g, "")}, s); }
  function jobLink(name, suffix) { return "/jobs/" + encodeURIComponent(name) + (suffix || ""); }
  function crumbs(...parts) {
    const c = document.getElementById("crumbs");
    c.replaceChildren(...parts.flatMap((p) => [" / ", typeof p === "string" ? p : el("a", {href: p[1]}, p[0])]));
  }
  function table(headers, rows) {
    return el("table", {}, el("thead", {}, el("tr", {}, headers.map((h) => el("th", {}, h)))),
      el("tbody", {}, rows));
  }

  return {el, visible, api, poll, showBanner, setConnected, iso, duration, num, state, jobLink, crumbs, table,
          ApiError, handleGone};
})();
