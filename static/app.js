() => {
  // Inference Inspector page behaviour (passed to launch(js=...)): keyboard shortcuts, chip clicks,
  // sortable inventory table. Everything is delegated on document, so re-rendered HTML keeps working.
  if (window.__inspectorReady) return;
  window.__inspectorReady = true;

  const click = (id) => {
    const el = document.getElementById(id);
    if (el) el.click();
  };
  const typing = (el) => el && (el.isContentEditable || ["INPUT", "TEXTAREA", "SELECT"].includes(el.tagName));

  document.addEventListener("keydown", (ev) => {
    if (typing(ev.target) || ev.ctrlKey || ev.metaKey || ev.altKey) return;
    if (ev.key === "ArrowRight") {
      ev.preventDefault();
      click("step-btn");
    } else if (ev.key === " " || ev.code === "Space") {
      ev.preventDefault();
      const status = document.getElementById("status-line");
      const playing = status && (status.dataset.phase || "").includes("playing");
      click(playing ? "pause-btn" : "play-btn");
    }
  });

  // A slider's number box, when left, sends its value in `release` and then Gradio clamps the box into the
  // slider's range (an emptied box becomes the minimum), so a button pressed next would run with a value
  // nobody typed. Put back what was typed, within the same blur (before the button's click): the server
  // refuses it by name (inspector/ui/fields.py), and the box keeps showing what it refused.
  document.addEventListener("blur", (ev) => {
    const box = ev.target;
    if (!(box instanceof HTMLInputElement) || box.type !== "number" || box.dataset.testid !== "number-input") return;
    const typed = box.value;
    // added now, this listener runs after Gradio's own blur listener on the box (the one that clamps)
    box.addEventListener("blur", () => {
      box.value = typed;
      box.dispatchEvent(new Event("input", { bubbles: true }));
    }, { once: true });
  }, true);

  // Image heatmaps (inspector/viz/heatimage.py): name the cell under the mouse from the element's data
  // (data-z: float32 values, base64, rows x cols; data-rows / data-cols: names, JSON; or, for a big one,
  // data-z-src: a file of that base64 text and data-names-src: a file of {"rows": [...], "cols": [...]},
  // fetched and decoded on the first hover, inspector/ui/bundle_parts.py HoverFiles).
  const decode64 = (text) => (Uint8Array.fromBase64 ? Uint8Array.fromBase64(text)
    : Uint8Array.from(atob(text), (c) => c.charCodeAt(0)));  // native where the browser has it (Chromium 140+)
  const fetched = (url) => fetch(url).then((r) => (r.ok ? r.text() : Promise.reject(new Error(`HTTP ${r.status}`))));
  const inlineNames = (heat) => ({ rows: JSON.parse(heat.dataset.rows), cols: JSON.parse(heat.dataset.cols) });
  const heatData = (heat) => {
    const src = heat.dataset.zSrc;
    const source = src || heat.dataset.z;
    if (heat._z !== source) {
      heat._z = source;
      heat._values = null;
      heat._rows = heat._cols = null;  // no tip until the names are here
      if (!src) {
        ({ rows: heat._rows, cols: heat._cols } = inlineNames(heat));
        heat._values = new Float32Array(decode64(heat.dataset.z).buffer);
      } else {
        const names = heat.dataset.namesSrc;
        Promise.all([fetched(src), names ? fetched(names).then(JSON.parse) : inlineNames(heat)])
          .then(([text, named]) => {
            if (heat._z !== source) return;  // a newer step's values replaced these meanwhile
            heat._tries = 0;
            heat._rows = named.rows;
            heat._cols = named.cols;
            heat._values = new Float32Array(decode64(text.trim()).buffer);
            if (heat._at) showTip(heat._at.box, heat._at.x, heat._at.y);
          })
          .catch(() => {
            if (heat._z !== source) return;
            heat._z = null;  // the next move asks again; so does the pointer resting on the map: the server
            // writes the file beside the update, and a hover quicker than that finds it missing
            const tries = heat._tries = (heat._tries || 0) + 1;
            const again = () => { if (heat._at) showTip(heat._at.box, heat._at.x, heat._at.y); };
            if (tries <= 5) setTimeout(again, 100 * tries);
          });
      }
    }
    return heat;
  };
  const showTip = (box, clientX, clientY) => {
    const heat = heatData(box.closest(".ii-heat"));
    heat._at = { box, x: clientX, y: clientY };
    if (!heat._rows) return;  // its files are on their way: the tip shows when they arrive
    const rect = box.getBoundingClientRect();
    const rows = heat._rows.length, cols = heat._cols.length;
    const row = Math.min(rows - 1, Math.floor(((clientY - rect.top) / rect.height) * rows));
    const col = Math.min(cols - 1, Math.floor(((clientX - rect.left) / rect.width) * cols));
    if (row < 0 || col < 0) return;
    const value = heat._values[row * cols + col].toFixed(Number(heat.dataset.digits));
    const tip = box.querySelector(".ii-hm-tip");
    tip.textContent = `${heat._rows[row]} → ${heat._cols[col]}: ${heat.dataset.what} ${value}`;
    tip.style.left = `${Math.min(clientX - rect.left + 12, rect.width - 180)}px`;
    tip.style.top = `${clientY - rect.top + 12}px`;
    tip.hidden = false;
  };
  document.addEventListener("mousemove", (ev) => {
    const box = ev.target.closest && ev.target.closest(".ii-hm-map");
    document.querySelectorAll(".ii-hm-tip:not([hidden])").forEach((t) => {
      if (box && box.contains(t)) return;
      t.hidden = true;
      const heat = t.closest(".ii-heat");
      if (heat) heat._at = null;  // the mouse left: values arriving later show no tip
    });
    if (box) showTip(box, ev.clientX, ev.clientY);
  });

  // "Link to this run": the server writes the query from the run it holds (inspector/ui/link_handlers.py);
  // the page's own address goes before it ("" stays "": the server refused and said why).
  window.inspectorRunLink = (query) => (query ? `${location.origin}${location.pathname}${query}` : "");

  // Write a value into a (hidden) Gradio textbox and fire its `input` event, which runs on the server.
  // The value is sent even when it equals the last one (a second click on the same candidate).
  const send = (selector, value) => {
    const box = document.querySelector(selector);
    if (!box) return;
    box.value = value;
    box.dispatchEvent(new Event("input", { bubbles: true })); // updates the component's value
    // Gradio 6's textbox fires its `input` event from `keypress`, after taking the value
    box.dispatchEvent(new KeyboardEvent("keypress", { key: "0", bubbles: true }));
  };

  // The head atlas map (inspector/ui/views/head_atlas.py): a click on a head sends its "L.H" (the cell's
  // customdata) to the hidden request box, as a DLA bar does. Plotly reports a click on its own graph div
  // (`plotly_click`, on the pointer's release) and drops its listeners when the plot is drawn anew, so the
  // listener is (re)attached as the pointer goes down on the map, before that click.
  const headClicked = (data) => {
    const point = data && data.points && data.points[0];
    if (point && point.customdata) send("#heads-head-request textarea", String(point.customdata));
  };
  document.addEventListener("mousedown", (ev) => {
    const plot = ev.target.closest && ev.target.closest("#heads-map .js-plotly-plot");
    if (!plot || typeof plot.on !== "function") return;
    plot.removeListener("plotly_click", headClicked);
    plot.on("plotly_click", headClicked);
  }, true);

  // A pipeline stage names the view tab that shows it (inspector/viz/pipeline.py): open that tab. The tabs sit
  // in two groups, Views and Labs (inspector/ui/app.py); Gradio mounts only the open group's tabs, so a label
  // not on the page is looked for in the other group, opened first. Resolves to whether the tab was found.
  const openTab = async (label) => {
    // the closed group's buttons stay in the page, hidden (no layout box): only a shown one counts
    const named = () => Array.from(document.querySelectorAll("button[role=tab]"))
      .find((b) => b.textContent.trim() === label && b.getClientRects().length > 0);
    const mounted = () => new Promise((resolve) => {
      const t0 = performance.now();
      const look = () => (named() || performance.now() - t0 > 3000 ? resolve(named()) : requestAnimationFrame(look));
      look();
    });
    let tab = named();
    for (const id of ["tab-views-button", "tab-labs-button"]) {
      if (tab) break;
      const group = document.getElementById(id);
      if (!group || group.getAttribute("aria-selected") === "true") continue;
      group.click();
      tab = await mounted();
    }
    if (tab) tab.click();
    return Boolean(tab);
  };
  window.inspectorOpenTab = openTab; // browser tests and docs/screenshots.py open tabs this way
  document.addEventListener("keydown", (ev) => {
    const stage = ev.target.closest && ev.target.closest(".ii-pipeline [data-tab]");
    if (stage && ev.key === "Enter") {
      ev.preventDefault();
      openTab(stage.dataset.tab);
    }
  });

  // A click on a token chip selects its position: write it into the position box and fire `input`.
  document.addEventListener("click", (ev) => {
    const stage = ev.target.closest && ev.target.closest(".ii-pipeline [data-tab]");
    if (stage) {
      openTab(stage.dataset.tab);
      return;
    }
    // branching: a "what if" candidate or a logit-lens cell forces that token; a tree node switches branch
    const force = ev.target.closest && (ev.target.closest(".ii-branch-force[data-step]")
      || ev.target.closest("table.ii-lens td[data-id]"));
    if (force) {
      const step = force.dataset.step || force.closest("table").dataset.step;
      send("#branch-request textarea", `${step}:${force.dataset.id}`);
      return;
    }
    // interventions tab: a DLA bar ablates its head or MLP; a patching cell shows that patched run
    const part = ev.target.closest && ev.target.closest(".ii-dla-bar[data-part]");
    if (part) {
      send("#iv-part-request textarea", part.dataset.part);
      return;
    }
    const cell = ev.target.closest && ev.target.closest(".ii-patch-cell[data-cell]");
    if (cell) {
      send("#iv-cell-request textarea", cell.dataset.cell);
      return;
    }
    const node = ev.target.closest && ev.target.closest(".ii-branch-node[data-branch]");
    if (node) {
      send("#branch-switch textarea", node.dataset.branch);
      return;
    }
    const chip = ev.target.closest && ev.target.closest(".ii-chip[data-pos]");
    if (chip) {
      const input = document.querySelector("#position input");
      if (!input) return;
      const pos = chip.dataset.pos;
      const next = input.value === pos ? "-1" : pos; // clicking the selected chip again clears it
      input.value = next;
      input.dispatchEvent(new Event("input", { bubbles: true }));
      document.querySelectorAll(".ii-chip.ii-selected").forEach((c) => c.classList.remove("ii-selected"));
      if (next !== "-1") chip.classList.add("ii-selected");
      return;
    }
    const th = ev.target.closest && ev.target.closest("table.ii-sortable th[data-col]");
    if (th) {
      const table = th.closest("table");
      const body = table.tBodies[0];
      const col = Number(th.dataset.col);
      const numeric = th.dataset.num === "1";
      const asc = th.dataset.dir !== "asc";
      table.querySelectorAll("th").forEach((h) => delete h.dataset.dir);
      th.dataset.dir = asc ? "asc" : "desc";
      const key = (row) => {
        const cell = row.cells[col];
        return numeric ? Number(cell.dataset.v || 0) : cell.textContent;
      };
      const rows = Array.from(body.rows);
      rows.sort((a, b) => {
        const ka = key(a), kb = key(b);
        const c = numeric ? ka - kb : String(ka).localeCompare(String(kb), undefined, { numeric: true });
        return asc ? c : -c;
      });
      rows.forEach((r) => body.appendChild(r));
    }
  });
}
