// The report's explorer: draws every figure of the page from the data embedded beside it
// (script#explorer-data, JSON), for the workspace and period chosen. Text from the data is
// only ever set as textContent or given to Plotly with its markup characters escaped: no value
// can become markup or script. Nothing is fetched: the page works offline.
(function () {
  "use strict";
  const DAY_MS = 86400000;
  const data = JSON.parse(document.getElementById("explorer-data").textContent);
  const $ = (id) => document.getElementById(id);
  const COLORS = {
    sent: "#4C72B0", delivered: "#5B8DC9", opened: "#55A868", signed: "#3B8C4A",
    completed: "#1F5E2E", progress: "#8C8C8C", expired: "#DD8452", revoked: "#C44E52",
  };
  const PLOT = { displaylogo: false, responsive: true };

  // Plotly reads a few HTML tags in its strings: escape them, so a name stays text.
  const safe = (text) => String(text == null ? "" : text)
    .replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
  const dayText = (day) => new Date(day * DAY_MS).toISOString().slice(0, 10);
  const dayOf = (text) => Math.floor(Date.parse(text + "T00:00:00Z") / DAY_MS);
  const weekOf = (day) => day - ((day + 3) % 7); // the Monday of a day (1970-01-01 was a Thursday)
  const count = (n) => Number(n).toLocaleString("en-US");
  const share = (part, whole) => (whole ? Math.round((100 * part) / whole) + "%" : "—");
  const hours = (h) => (h < 1 ? Math.round(h * 60) + " min" : h < 48 ? h.toFixed(1) + " h"
    : (h / 24).toFixed(1) + " d");
  const quantile = (sorted, q) => {
    if (!sorted.length) return null;
    const at = (sorted.length - 1) * q, low = Math.floor(at), high = Math.ceil(at);
    return sorted[low] + (sorted[high] - sorted[low]) * (at - low);
  };
  const rows = (columns) => {
    const names = Object.keys(columns), length = names.length ? columns[names[0]].length : 0;
    const out = [];
    for (let i = 0; i < length; i++) {
      const row = {};
      for (const name of names) row[name] = columns[name][i];
      out.push(row);
    }
    return out;
  };
  const setText = (id, text) => { $(id).textContent = text; };

  // ------------------------------------------------------------------ choices
  const workspaces = data.workspaces.map((ws) => ({
    ...ws,
    shipmentRows: rows(ws.shipments),
    signatureRows: rows(ws.signatures),
    waitingRows: rows(ws.waiting),
    dayRows: rows(ws.waiting_by_day),
    positionRows: rows(ws.positions),
    metricRows: rows(ws.metrics.by_day),
  }));
  const chooser = $("workspace");
  workspaces.forEach((ws, i) => {
    const option = document.createElement("option");
    option.value = String(i);
    option.textContent = ws.label === ws.name ? ws.label : ws.label + " (" + ws.name + ")";
    chooser.appendChild(option);
  });
  $("workspace-choice").hidden = workspaces.length < 2;

  function period(ws) {
    const days = ws.shipmentRows.map((s) => s.sent_day);
    const last = ws.data_as_of ? dayOf(ws.data_as_of.slice(0, 10)) : Math.max(...days);
    const first = Math.min(...days);
    const chosen = $("period").value;
    if (chosen === "custom") {
      const from = $("from").value ? dayOf($("from").value) : first;
      const to = $("to").value ? dayOf($("to").value) : last;
      return { from, to, label: dayText(from) + " to " + dayText(to), preset: null };
    }
    if (chosen === "all") return { from: first, to: last, label: "all time", preset: "all" };
    const n = Number(chosen);
    return { from: last - n + 1, to: last, label: "the last " + n + " days of data",
      preset: chosen };
  }
  const inside = (p, day) => day != null && day >= p.from && day <= p.to;

  // The funnel metrics of the period, as the semantic layer defines them (models/models/
  // semantic/): the counts are the metrics' daily values summed over the period's days (the
  // metrics are sums), the completion rate their ratio; the metrics no sum gives (a median,
  // distinct shipments waiting) come as computed for each preset period.
  const COUNTS = ["sent", "delivered", "opened", "signed", "completed", "expired", "revoked",
    "signers_waiting_now"];
  function metricsOf(ws, p) {
    const figures = Object.fromEntries(COUNTS.map((name) => [name, 0]));
    for (const row of ws.metricRows) {
      if (!inside(p, row.day)) continue;
      for (const name of COUNTS) figures[name] += row[name] || 0;
    }
    const preset = p.preset ? ws.metrics.periods[p.preset] : null;
    figures.median_hours_to_sign = preset ? preset.median_hours_to_sign : undefined;
    figures.waiting_now = preset ? preset.waiting_now : undefined;
    return figures;
  }

  // ------------------------------------------------------------------ drawing
  function draw() {
    const ws = workspaces[Number(chooser.value) || 0];
    if (!ws) return;
    const p = period(ws);
    $("from").value = dayText(p.from);
    $("to").value = dayText(p.to);
    const sent = ws.shipmentRows.filter((s) => inside(p, s.sent_day));
    const figures = metricsOf(ws, p);
    setText("stamp-workspace", ws.label + (ws.label === ws.name ? "" : " (" + ws.name + ")"));
    setText("stamp-as-of", ws.data_as_of ? ws.data_as_of.replace("T", " ").replace("Z", " UTC")
      : "unknown");
    setText("stamp-loaded", ws.loaded_at ? ws.loaded_at.replace("T", " ").replace("Z", " UTC")
      : "unknown");
    setText("stamp-period", p.label);
    funnel(figures);
    weekly(ws, p, sent);
    completions(ws, p);
    timeToSign(ws, p, figures);
    documentsRanked(ws, sent);
    positions(ws, p);
    endings(ws, p, figures);
    waitingByDay(ws, p);
    waitingTable(ws, p, figures);
    slowestTable(ws, p);
  }

  function funnel(figures) {
    const stages = [
      ["Sent", figures.sent, COLORS.sent], ["Delivered", figures.delivered, COLORS.delivered],
      ["Opened", figures.opened, COLORS.opened], ["Signed", figures.signed, COLORS.signed],
      ["Completed", figures.completed, COLORS.completed],
    ];
    for (const name of ["sent", "delivered", "opened", "signed", "completed", "expired",
      "revoked"]) setText("kpi-" + name, count(figures[name]));
    setText("kpi-completion", share(figures.completed, figures.sent));
    Plotly.react("chart-funnel", [{
      type: "bar", x: stages.map((s) => s[0]), y: stages.map((s) => s[1]),
      marker: { color: stages.map((s) => s[2]) },
      text: stages.map((s) => count(s[1]) + "<br>" + share(s[1], figures.sent) + " of sent"),
      textposition: "auto", hovertemplate: "%{x}: %{y:,} shipments<extra></extra>",
    }], { title: { text: "Overall signing funnel" }, yaxis: { title: { text: "Shipments" } },
      xaxis: { title: { text: "Funnel stage reached" } }, margin: { t: 50 } }, PLOT);
    let worst = 1;
    for (let i = 1; i < stages.length; i++) {
      const loss = stages[i - 1][1] ? 1 - stages[i][1] / stages[i - 1][1] : 0;
      const worstLoss = stages[worst - 1][1] ? 1 - stages[worst][1] / stages[worst - 1][1] : 0;
      if (loss > worstLoss) worst = i;
    }
    setText("caption-funnel", figures.sent
      ? "Of " + count(figures.sent) + " shipments sent, " + count(figures.completed) + " (" +
        share(figures.completed, figures.sent) + ") were completed. The largest step loss is " +
        "from " + stages[worst - 1][0].toLowerCase() + " to " + stages[worst][0].toLowerCase() +
        ": " + share(stages[worst - 1][1] - stages[worst][1], stages[worst - 1][1]) +
        " did not go on."
      : "No shipment was sent in this period.");
  }

  function weekly(ws, p, sent) {
    // the week's metrics (their daily values summed), and how many of its shipments ended
    const weeks = new Map();
    const week = (day) => {
      const w = weekOf(day);
      if (!weeks.has(w)) weeks.set(w, { sent: 0, opened: 0, signed: 0, completed: 0, ended: 0 });
      return weeks.get(w);
    };
    for (const day of ws.metricRows) {
      if (!inside(p, day.day) || !day.sent) continue;
      const row = week(day.day);
      for (const name of ["sent", "opened", "signed", "completed"]) row[name] += day[name] || 0;
    }
    for (const s of sent) if (s.stages & (16 | 32 | 64)) week(s.sent_day).ended += 1;
    const keys = [...weeks.keys()].sort((a, b) => a - b), x = keys.map(dayText);
    const line = (field, name, color, dash) => ({
      type: "scatter", mode: "lines+markers", name, x, line: { color, dash },
      y: keys.map((k) => weeks.get(k)[field] / weeks.get(k).sent),
      hovertemplate: name + ": %{y:.0%} of the week's shipments<extra>%{x}</extra>",
    });
    const progress = keys.map((k) => 1 - weeks.get(k).ended / weeks.get(k).sent);
    Plotly.react("chart-weekly", [
      line("opened", "Opened", COLORS.opened), line("signed", "Signed", COLORS.signed),
      line("completed", "Completed", COLORS.completed),
      { type: "scatter", mode: "lines+markers", name: "Still in progress", x, y: progress,
        line: { color: COLORS.progress, dash: "dash" },
        hovertemplate: "Still in progress: %{y:.0%}<extra>%{x}</extra>" },
      { type: "bar", name: "Shipments sent", x, y: keys.map((k) => weeks.get(k).sent),
        yaxis: "y2", marker: { color: COLORS.sent }, opacity: 0.35,
        hovertemplate: "%{y:,} shipments sent<extra>%{x}</extra>" },
    ], { title: { text: "Weekly cohort conversion (by week of sending)" },
      xaxis: { title: { text: "Week of sending (Monday, UTC)" } },
      yaxis: { title: { text: "Share of the week's sent shipments" }, tickformat: ".0%",
        range: [0, 1.05] },
      yaxis2: { title: { text: "Shipments sent" }, overlaying: "y", side: "right",
        showgrid: false }, legend: { orientation: "h", y: -0.25 }, margin: { t: 50 } }, PLOT);
    const settled = keys.filter((k) => 1 - weeks.get(k).ended / weeks.get(k).sent < 0.05);
    const rates = settled.map((k) => weeks.get(k).completed / weeks.get(k).sent).sort();
    setText("caption-weekly", keys.length === 0 ? "No week of sending in this period." :
      rates.length ? keys.length + " weekly cohorts. Among the " + rates.length + " with fewer " +
        "than 5% still in progress, completion ranged from " + share(rates[0], 1) + " to " +
        share(rates[rates.length - 1], 1) + " (median " + share(quantile(rates, 0.5), 1) + ")."
      : keys.length + " weekly cohorts, all with 5% or more still in progress.");
  }

  function completions(ws, p) {
    const weeks = new Map();
    for (const s of ws.shipmentRows) {
      if (!(s.stages & 16) || !inside(p, s.completed_day)) continue;
      const w = weekOf(s.completed_day);
      const row = weeks.get(w) || [];
      row.push(s.hours_to_complete);
      weeks.set(w, row);
    }
    const keys = [...weeks.keys()].sort((a, b) => a - b), x = keys.map(dayText);
    const medians = keys.map((k) => quantile(weeks.get(k).filter((h) => h != null)
      .sort((a, b) => a - b), 0.5));
    Plotly.react("chart-completions", [
      { type: "bar", name: "Shipments completed", x, y: keys.map((k) => weeks.get(k).length),
        marker: { color: COLORS.completed },
        hovertemplate: "%{y:,} completed<extra>week of %{x}</extra>" },
      { type: "scatter", mode: "lines+markers", name: "Median hours from sending", x,
        y: medians, yaxis: "y2", line: { color: COLORS.expired },
        hovertemplate: "median %{y:.1f} h from sending<extra>week of %{x}</extra>" },
    ], { title: { text: "Completions by week of completion" },
      xaxis: { title: { text: "Week of completion (Monday, UTC)" } },
      yaxis: { title: { text: "Shipments completed" } },
      yaxis2: { title: { text: "Median hours to complete" }, overlaying: "y", side: "right",
        showgrid: false }, legend: { orientation: "h", y: -0.25 }, margin: { t: 50 } }, PLOT);
    const total = keys.reduce((sum, k) => sum + weeks.get(k).length, 0);
    setText("caption-completions", total
      ? count(total) + " shipments were completed in this period, whenever they were sent; " +
        "the busiest week was " + x[keys.indexOf(keys.reduce((a, b) =>
          (weeks.get(b).length > weeks.get(a).length ? b : a)))] + "."
      : "No shipment was completed in this period.");
  }

  function timeToSign(ws, p, figures) {
    const values = ws.signatureRows.filter((s) => inside(p, s.sent_day)).map((s) => s.hours)
      .sort((a, b) => a - b);
    // the metric's median for a preset period; a chosen range has only the signatures to go by
    const median = figures.median_hours_to_sign === undefined ? quantile(values, 0.5)
      : figures.median_hours_to_sign;
    const p90 = quantile(values, 0.9);
    Plotly.react("chart-time", [{
      type: "histogram", x: values.map((h) => Math.log10(Math.max(h, 1 / 60))), nbinsx: 40,
      marker: { color: COLORS.signed }, name: "Signatures",
      hovertemplate: "%{y:,} signatures<extra></extra>",
    }], { title: { text: "Time to sign: document reaching the signer to their signature" },
      xaxis: { title: { text: "Time to sign (log scale)" },
        tickvals: [1 / 60, 0.25, 1, 3, 12, 24, 72, 168, 720].map(Math.log10),
        ticktext: ["1 min", "15 min", "1 h", "3 h", "12 h", "1 d", "3 d", "1 wk", "30 d"] },
      yaxis: { title: { text: "Signatures" } }, margin: { t: 50 },
      shapes: median == null ? [] : [median, p90].map((h, i) => ({
        type: "line", xref: "x", yref: "paper", y0: 0, y1: 1,
        x0: Math.log10(Math.max(h, 1 / 60)), x1: Math.log10(Math.max(h, 1 / 60)),
        line: { color: "black", dash: i ? "dash" : "solid" } })) }, PLOT);
    setText("caption-time", values.length
      ? count(values.length) + " signatures: half were made within " + hours(median) +
        " (solid line), 90% within " + hours(p90) + " (dashed line); the slowest took " +
        hours(values[values.length - 1]) + "."
      : "No signature of a shipment sent in this period.");
  }

  function documentsRanked(ws, sent) {
    const byDocument = new Map();
    for (const s of sent) {
      const row = byDocument.get(s.document_index) || { sent: 0, completed: 0 };
      row.sent += 1;
      if (s.stages & 16) row.completed += 1;
      byDocument.set(s.document_index, row);
    }
    const ranked = [...byDocument.entries()].sort((a, b) => b[1].sent - a[1].sent).slice(0, 12)
      .reverse();
    const names = ranked.map(([i]) => safe(ws.documents[i]));
    Plotly.react("chart-documents", [{
      type: "bar", orientation: "h", y: names, x: ranked.map(([, r]) => r.sent),
      name: "Sent", marker: { color: COLORS.sent },
      text: ranked.map(([, r]) => count(r.sent) + " sent, " + share(r.completed, r.sent) +
        " completed"), textposition: "auto",
      hovertemplate: "%{y}: %{x:,} sent<extra></extra>",
    }], { title: { text: "Documents by volume, with their completion rate" },
      xaxis: { title: { text: "Shipments sent" } }, margin: { t: 50, l: 220 },
      height: 160 + 28 * Math.max(ranked.length, 1) }, PLOT);
    const rated = [...byDocument.entries()].filter(([, r]) => r.sent >= 20)
      .sort((a, b) => a[1].completed / a[1].sent - b[1].completed / b[1].sent);
    setText("caption-documents", rated.length
      ? byDocument.size + " documents sent. Among those sent 20 times or more, the lowest " +
        "completion is " + ws.documents[rated[0][0]] + " (" + share(rated[0][1].completed,
        rated[0][1].sent) + " of " + count(rated[0][1].sent) + "), the highest " +
        ws.documents[rated[rated.length - 1][0]] + " (" + share(rated[rated.length - 1][1]
        .completed, rated[rated.length - 1][1].sent) + ")."
      : byDocument.size + " documents sent; none 20 times or more in this period.");
  }

  function positions(ws, p) {
    const outcomes = ["Signed", "Opened, not signed", "Reached, not opened",
      "Waiting for the previous signer", "Never reached (flow ended before)"];
    const colors = [COLORS.signed, "#9ED09F", "#A6BDDB", "#F2C14E", COLORS.revoked];
    const table = new Map();
    for (const r of ws.positionRows.filter((r) => inside(p, r.sent_day))) {
      const row = table.get(r.position) || [0, 0, 0, 0, 0];
      row[r.outcome] += r.count;
      table.set(r.position, row);
    }
    const keys = [...table.keys()].sort((a, b) => a - b);
    const totals = keys.map((k) => table.get(k).reduce((a, b) => a + b, 0));
    Plotly.react("chart-positions", outcomes.map((name, o) => ({
      type: "bar", name, x: keys.map(String), y: keys.map((k, i) => table.get(k)[o] / totals[i]),
      marker: { color: colors[o] }, customdata: keys.map((k) => table.get(k)[o]),
      hovertemplate: name + ": %{y:.0%} (%{customdata:,} recipients)<extra>position %{x}</extra>",
    })), { barmode: "stack", title: { text: "Drop-off by recipient position in sequential flows" },
      xaxis: { title: { text: "Position in the signing order (1 = first signer)" } },
      yaxis: { title: { text: "Share of the recipients at that position" }, tickformat: ".0%" },
      legend: { orientation: "h", y: -0.3 }, margin: { t: 50 } }, PLOT);
    setText("caption-positions", keys.length
      ? "Share of sequential recipients who signed: " + keys.map((k, i) =>
        share(table.get(k)[0], totals[i]) + " at position " + k).join(", ") + "."
      : "No sequential flow was sent in this period.");
  }

  function endings(ws, p, figures) {
    const weeks = new Map();
    for (const day of ws.metricRows) {
      if (!inside(p, day.day) || !(day.expired || day.revoked)) continue;
      const w = weekOf(day.day), row = weeks.get(w) || [0, 0];
      row[0] += day.expired || 0;
      row[1] += day.revoked || 0;
      weeks.set(w, row);
    }
    const keys = [...weeks.keys()].sort((a, b) => a - b), x = keys.map(dayText);
    Plotly.react("chart-endings", [["Expired", 0, COLORS.expired], ["Revoked", 1, COLORS.revoked]]
      .map(([name, slot, color]) => ({ type: "bar", name, x, marker: { color },
        y: keys.map((k) => weeks.get(k)[slot]),
        hovertemplate: name + ": %{y:,}<extra>week of %{x}</extra>" })),
    { barmode: "stack", title: { text: "Expired and revoked shipments by week of sending" },
      xaxis: { title: { text: "Week the shipment was sent (Monday, UTC)" } },
      yaxis: { title: { text: "Shipments" } }, margin: { t: 50 } }, PLOT);
    setText("caption-endings", "Of the " + count(figures.sent) + " shipments sent in this " +
      "period, " + count(figures.expired) + " expired and " + count(figures.revoked) +
      " were revoked.");
  }

  function waitingByDay(ws, p) {
    const days = ws.dayRows.filter((d) => inside(p, d.day)), x = days.map((d) => dayText(d.day));
    Plotly.react("chart-waiting", [
      { type: "scatter", mode: "lines", fill: "tozeroy", name: "Signers waited on", x,
        y: days.map((d) => d.signers), line: { shape: "hv", color: COLORS.opened },
        hovertemplate: "%{y:,} signers<extra>%{x}</extra>" },
      { type: "scatter", mode: "lines", name: "Shipments waiting", x,
        y: days.map((d) => d.shipments), line: { shape: "hv", color: COLORS.sent, width: 2 },
        hovertemplate: "%{y:,} shipments<extra>%{x}</extra>" },
    ], { title: { text: "Shipments waiting on a signer, by day" },
      xaxis: { title: { text: "Day (UTC), at its end" } },
      yaxis: { title: { text: "Shipments / signers" }, rangemode: "tozero" },
      legend: { orientation: "h", y: -0.25 }, margin: { t: 50 } }, PLOT);
    const last = days[days.length - 1];
    setText("caption-waiting", last
      ? "On " + dayText(last.day) + ", " + count(last.shipments) + " shipments were waiting on " +
        count(last.signers) + " signers."
      : "No day in this period.");
  }

  // ------------------------------------------------------------------ tables
  const tables = {};

  function fillTable(id, headers, body) {
    tables[id] = { headers, body };
    const table = $(id);
    table.replaceChildren();
    const head = table.createTHead().insertRow();
    for (const h of headers) {
      const cell = document.createElement("th");
      cell.textContent = h;
      head.appendChild(cell);
    }
    const rowsOut = table.createTBody();
    for (const values of body) {
      const row = rowsOut.insertRow();
      for (const v of values) row.insertCell().textContent = v == null ? "" : String(v);
    }
  }

  function person(ws, index) {
    return ws.people[index] || [null, null, null];
  }

  function waitingTable(ws, p, figures) {
    const waiting = ws.waitingRows.filter((w) => inside(p, w.since_day));
    setText("kpi-waiting-signers", count(figures.signers_waiting_now));
    // the metric for a preset period; for a chosen range, the shipments the table lists
    setText("kpi-waiting-shipments", count(figures.waiting_now === undefined
      ? new Set(waiting.map((w) => w.shipment)).size : figures.waiting_now));
    fillTable("table-waiting", ["Shipment", "Document", "Waiting on", "E-mail", "Company",
      "Position", "Waiting since (UTC)", "Hours waiting", "Opened"],
    waiting.map((w) => {
      const [name, email, company] = person(ws, w.name_index);
      return [w.shipment, ws.documents[w.document_index], name, email, company, w.position,
        w.since, w.hours == null ? null : w.hours.toFixed(1), w.opened ? "yes" : "no"];
    }));
  }

  function slowestTable(ws, p) {
    const slowest = ws.signatureRows.filter((s) => inside(p, s.sent_day)).slice(0, 25);
    fillTable("table-slowest", ["Signer", "E-mail", "Company", "Document", "Sent (UTC)",
      "Signed (UTC)", "Hours to sign"], slowest.map((s) => {
      const [name, email, company] = person(ws, s.name_index);
      return [name, email, company, ws.documents[s.document_index], dayText(s.sent_day),
        dayText(s.signed_day), s.hours.toFixed(1)];
    }));
  }

  // A cell a spreadsheet would read as a formula is prefixed with a quote (CSV injection).
  const csvCell = (value) => {
    let text = value == null ? "" : String(value);
    if (/^[=+\-@\t\r]/.test(text)) text = "'" + text;
    return /[",\n\r]/.test(text) ? '"' + text.replace(/"/g, '""') + '"' : text;
  };

  function download(id, name) {
    const { headers, body } = tables[id];
    const csv = [headers, ...body].map((row) => row.map(csvCell).join(",")).join("\r\n");
    const link = document.createElement("a");
    link.href = "data:text/csv;charset=utf-8," + encodeURIComponent(csv + "\r\n");
    link.download = name;
    document.body.appendChild(link);
    link.click();
    link.remove();
  }

  $("download-waiting").addEventListener("click", () => download("table-waiting",
    "waiting_on_whom.csv"));
  $("download-slowest").addEventListener("click", () => download("table-slowest",
    "slowest_signers.csv"));
  setText("stamp-generated", data.generated_at.replace("T", " ").replace("Z", " UTC"));
  chooser.addEventListener("change", draw);
  $("period").addEventListener("change", draw);
  for (const id of ["from", "to"]) {
    $(id).addEventListener("change", () => { $("period").value = "custom"; draw(); });
  }
  draw();
  document.body.dataset.explorer = "ready";
})();
