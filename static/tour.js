// The guided tour (inspector/ui/tour_panel.py): runs once, as the tour card's js_on_load. The tour's text
// arrives as the "tour" view (one <section class="ii-tour-step"> per step, inspector/viz/tour.py); this
// script shows one step at a time and keeps showing the same step when a new step's numbers arrive.
// Open on a browser's first visit until closed (localStorage remembers it), reopened by "Tour ?", and
// at a view's own step by the "?" put beside each view's caption. Escape closes it.
if (!window.__inspectorTour) {
  window.__inspectorTour = true;
  const SEEN = "inspector-tour-seen";
  const frame = () => document.getElementById("tour");
  const steps = () => Array.from(document.querySelectorAll("#tour-view .ii-tour-step"));
  let at = 0;
  let wantOpen = false; // opened before its steps arrived: open once they do
  const isOpen = () => Boolean(frame() && frame().classList.contains("ii-tour-open"));
  const seen = () => { try { return localStorage.getItem(SEEN) === "1"; } catch (e) { return false; } };

  const show = () => {
    const all = steps();
    const f = frame();
    if (!all.length || !f) return false;
    at = Math.max(0, Math.min(at, all.length - 1));
    all.forEach((s, i) => { s.hidden = i !== at; });
    f.dataset.step = all[at].dataset.stage;
    const back = document.getElementById("tour-back"), next = document.getElementById("tour-next");
    if (back) back.disabled = at === 0;
    if (next) next.disabled = at === all.length - 1;
    return true;
  };
  const open = (stage) => {
    const f = frame();
    if (!f) return;
    const all = steps();
    const i = stage ? all.findIndex((s) => s.dataset.stage === stage) : -1;
    at = i >= 0 ? i : (stage === undefined ? at : 0);
    f.classList.add("ii-tour-open");
    wantOpen = !show();
  };
  const close = () => {
    const f = frame();
    if (f) f.classList.remove("ii-tour-open");
    wantOpen = false;
    try { localStorage.setItem(SEEN, "1"); } catch (e) { /* private mode: not remembered */ }
  };
  window.inspectorTour = { open, close, isOpen, step: () => (steps()[at] || {}).dataset };

  // "?" beside each view's caption, for the views the tour explains (data-tab-id of its steps)
  const addHelp = () => {
    const first = {};
    steps().forEach((s) => { if (s.dataset.tabId && !(s.dataset.tabId in first)) first[s.dataset.tabId] = s.dataset.stage; });
    Object.entries(first).forEach(([tabId, stage]) => {
      const caption = document.querySelector(`#${tabId} .ii-caption`);
      if (!caption || caption.querySelector(".ii-tour-help")) return;
      const b = document.createElement("button");
      b.type = "button";
      b.className = "ii-tour-help";
      b.dataset.stage = stage;
      b.title = "what this view shows (opens the tour here)";
      b.textContent = "?";
      (caption.querySelector("p") || caption).prepend(b); // inline, before the caption's first words
    });
  };
  // The tour's text changed (a new step's numbers, or the first text after the page loaded): keep showing
  // the same step; open it on a first visit. Only the tour's own slot is watched: a watcher over the whole
  // page would run on every plot redraw.
  const onTourText = () => {
    addHelp();
    if (wantOpen || (!seen() && !isOpen() && !window.__inspectorTourShown && steps().length)) {
      window.__inspectorTourShown = true; // the first-visit opening happens once per page
      open(wantOpen ? undefined : steps()[0].dataset.stage);
    } else if (isOpen()) {
      const all = steps();
      if (all.length && (all[at] === undefined || all[at].hidden || all.some((s, i) => i !== at && !s.hidden))) show();
    }
  };
  const watchTour = () => {
    const view = document.getElementById("tour-view");
    if (!view) { setTimeout(watchTour, 200); return; }
    new MutationObserver(onTourText).observe(view, { childList: true, subtree: true });
    onTourText();
  };
  watchTour();
  // a view tab's content is mounted when the tab is first opened: add its "?" once it is there
  const helpSoon = () => [50, 250, 800, 2000].forEach((ms) => setTimeout(addHelp, ms));

  document.addEventListener("click", (ev) => {
    const t = ev.target.closest ? ev.target : null;
    if (!t) return;
    if (t.closest("button[role=tab], .overflow-dropdown button")) { helpSoon(); return; }
    if (t.closest("#tour-btn")) { if (isOpen()) close(); else open(undefined); return; }
    if (t.closest("#tour-close")) { close(); return; }
    if (t.closest("#tour-back")) { at -= 1; show(); return; }
    if (t.closest("#tour-next")) { at += 1; show(); return; }
    const help = t.closest(".ii-tour-help[data-stage]");
    if (help) { open(help.dataset.stage); return; }
    const view = t.closest(".ii-tour-open[data-tab]");
    if (view) {
      ev.preventDefault();
      if (window.inspectorOpenTab) window.inspectorOpenTab(view.dataset.tab);
    }
  });
  document.addEventListener("keydown", (ev) => {
    if (ev.key === "Escape" && isOpen()) close();
  });
}
