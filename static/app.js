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

  // The all-heads attention overview is an image (inspector/viz/attention.py): name the cell under the
  // mouse from its data-z (uint8 weights, base64, rows = layer·head) and data-labels (key positions).
  const overviewData = (map) => {
    if (map._z !== map.dataset.z) {
      const raw = atob(map.dataset.z);
      map._cells = Uint8Array.from(raw, (c) => c.charCodeAt(0));
      map._labels = JSON.parse(map.dataset.labels);
      map._z = map.dataset.z;
    }
    return map;
  };
  document.addEventListener("mousemove", (ev) => {
    const box = ev.target.closest && ev.target.closest(".ii-ov-map");
    document.querySelectorAll(".ii-ov-tip:not([hidden])").forEach((t) => {
      if (!box || !box.contains(t)) t.hidden = true;
    });
    if (!box) return;
    const map = overviewData(box.closest(".ii-overview"));
    const rect = box.getBoundingClientRect();
    const heads = Number(map.dataset.heads), keys = Number(map.dataset.keys);
    const rows = Number(map.dataset.layers) * heads;
    const row = Math.min(rows - 1, Math.floor(((ev.clientY - rect.top) / rect.height) * rows));
    const col = Math.min(keys - 1, Math.floor(((ev.clientX - rect.left) / rect.width) * keys));
    if (row < 0 || col < 0) return;
    const head = row % heads;
    const tip = box.querySelector(".ii-ov-tip");
    tip.textContent = `L${Math.floor(row / heads)}·H${head}·kv${Math.floor(head / Number(map.dataset.rep))}` +
      ` → key ${map._labels[col]}: weight ${map._cells[row * keys + col]}/255`;
    tip.style.left = `${Math.min(ev.clientX - rect.left + 12, rect.width - 160)}px`;
    tip.style.top = `${ev.clientY - rect.top + 12}px`;
    tip.hidden = false;
  });

  // A click on a token chip selects its position: write it into the position box and fire `input`.
  document.addEventListener("click", (ev) => {
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
