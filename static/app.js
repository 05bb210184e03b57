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
