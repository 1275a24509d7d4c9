// rmqstore console: a small vanilla-JS app over the broker's JSON API (/api/...). No build step.
"use strict";

const $page = document.getElementById("page");
const timers = [];
const history = { t: [], inRate: [], outRate: [], last: null, lag: {} };

function esc(v) {
  return String(v === null || v === undefined ? "" : v).replace(/[&<>"']/g,
    c => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));
}
function fmtTime(ms) { return ms > 0 ? new Date(ms).toISOString().replace("T", " ").replace("Z", "") : ""; }
function fmtBytes(n) {
  const u = ["B", "KiB", "MiB", "GiB", "TiB"]; let i = 0;
  while (n >= 1024 && i < u.length - 1) { n /= 1024; i++; }
  return n.toFixed(i ? 1 : 0) + " " + u[i];
}
async function api(path, opts) {
  const o = Object.assign({ headers: {} }, opts || {});
  const token = document.getElementById("token").value;
  if (o.method && o.method !== "GET" && token) o.headers["Authorization"] = "Bearer " + token;
  if (o.body) o.headers["Content-Type"] = "application/json";
  const r = await fetch(path, o);
  const doc = await r.json();
  if (!r.ok) throw new Error(doc.error || ("HTTP " + r.status));
  return doc;
}
function table(cols, rows, id) {
  const head = cols.map(c => "<th>" + esc(c[0]) + "</th>").join("");
  const body = rows.map(r => "<tr>" + cols.map(c => {
    const v = c[1](r);
    return c[2] ? "<td class=num>" + esc(v) + "</td>" : "<td>" + v + "</td>";
  }).join("") + "</tr>").join("");
  return "<table" + (id ? " id=" + id : "") + "><tr>" + head + "</tr>" + body + "</table>";
}
function chart(canvas, series, labels) {
  const ctx = canvas.getContext("2d"), w = canvas.width, h = canvas.height;
  ctx.clearRect(0, 0, w, h);
  const all = series.flat(); const max = Math.max(1, ...all);
  const colors = ["#2a7", "#27c", "#c72", "#a3a", "#888"];
  ctx.font = "11px sans-serif"; ctx.fillStyle = "#666"; ctx.fillText(max.toFixed(0), 4, 12);
  series.forEach((s, k) => {
    ctx.strokeStyle = colors[k % colors.length]; ctx.beginPath();
    s.forEach((v, i) => {
      const x = 30 + (w - 40) * (s.length > 1 ? i / (s.length - 1) : 0), y = h - 10 - (h - 24) * v / max;
      if (i) ctx.lineTo(x, y); else ctx.moveTo(x, y);
    });
    ctx.stroke();
    ctx.fillStyle = colors[k % colors.length]; ctx.fillText(labels[k], 40 + 90 * k, 12);
  });
}
function every(ms, fn) { fn(); timers.push(setInterval(fn, ms)); }

// --- pages --------------------------------------------------------------------------------------
const pages = {
  async cluster() {
    const b = await api("/api/broker");
    $page.innerHTML = "<h2>Cluster</h2>" + table([["broker", r => esc(r.brokerName)], ["cluster", r => esc(r.cluster)],
      ["address", r => esc(r.address)], ["role", r => esc(r.role)], ["read-only", r => esc(r.readOnly)],
      ["connections", r => r.connections, 1], ["commit log", r => esc(r.minPhyOffset + " .. " + r.maxPhyOffset)],
      ["store", r => esc(r.store)]], [b], "brokers") +
      (b.slaves.length ? "<h3>Slaves</h3>" + table([["peer", s => esc(s.peer)], ["ack offset", s => s.ackOffset, 1],
        ["behind (bytes)", s => b.maxPhyOffset - s.ackOffset, 1]], b.slaves) : "") +
      "<h3>Messages per second</h3><div class=cards><div class=card>in<b id=rateIn>-</b></div>" +
      "<div class=card>out<b id=rateOut>-</b></div></div><canvas id=rates width=720 height=200></canvas>";
    if (!history.last) {  // seed the chart with the broker's own history (a sample every 10 s)
      const h = await api("/api/history");
      for (let i = 1; i < h.length; i++) {
        const dt = Math.max(0.001, (h[i].t - h[i - 1].t) / 1000);
        history.inRate.push((h[i].in - h[i - 1].in) / dt); history.outRate.push((h[i].out - h[i - 1].out) / dt);
      }
    }
    every(2000, async () => {
      const d = await api("/api/broker");
      const last = history.last;
      if (last) {
        const dt = Math.max(0.001, (d.now - last.now) / 1000);
        history.inRate.push((d.inTotal - last.inTotal) / dt); history.outRate.push((d.outTotal - last.outTotal) / dt);
        if (history.inRate.length > 150) { history.inRate.shift(); history.outRate.shift(); }
      }
      history.last = d;
      const el = document.getElementById("rates");
      if (!el) return;
      document.getElementById("rateIn").textContent = (history.inRate.at(-1) || 0).toFixed(0);
      document.getElementById("rateOut").textContent = (history.outRate.at(-1) || 0).toFixed(0);
      chart(el, [history.inRate, history.outRate], ["in/s", "out/s"]);
    });
  },

  async topics() {
    const ts = await api("/api/topics");
    $page.innerHTML = "<h2>Topics</h2>" +
      "<form class=inline id=createTopic><input name=topic placeholder=topic> <input name=queues size=3 value=4>" +
      "<button>create</button> <span class=err id=topicErr></span></form>" +
      table([["topic", t => "<a href='#/topic/" + encodeURIComponent(t.topic) + "'>" + esc(t.topic) + "</a>"],
        ["queues (r/w)", t => esc(t.readQueueNums + "/" + t.writeQueueNums)], ["perm", t => t.perm, 1],
        ["messages", t => t.messages, 1], ["system", t => esc(t.system ? "yes" : "")]], ts, "topics");
    document.getElementById("createTopic").onsubmit = async e => {
      e.preventDefault();
      const f = new FormData(e.target);
      try {
        await api("/api/topics", { method: "POST", body: JSON.stringify({ topic: f.get("topic"), queues: +f.get("queues") }) });
        route();
      } catch (err) { document.getElementById("topicErr").textContent = err.message; }
    };
  },

  async topic(name) {
    const qs = await api("/api/topics/" + encodeURIComponent(name) + "/queues");
    $page.innerHTML = "<h2>Topic " + esc(name) + "</h2>" + table([["queue", q => q.queueId, 1],
      ["min offset", q => q.minOffset, 1], ["max offset", q => q.maxOffset, 1],
      ["last stored", q => esc(fmtTime(q.lastUpdateTimestamp))]], qs, "queues");
  },

  async groups() {
    const gs = await api("/api/groups");
    $page.innerHTML = "<h2>Consumer groups</h2>" + table([
      ["group", g => "<a href='#/group/" + encodeURIComponent(g.group) + "'>" + esc(g.group) + "</a>"],
      ["online", g => g.online, 1], ["type", g => esc(g.consumeType || "")], ["model", g => esc(g.messageModel || "")],
      ["lag", g => g.lag, 1], ["topics", g => esc(g.topics.join(", "))]], gs, "groups");
  },

  async group(name) {
    $page.innerHTML = "<h2>Group " + esc(name) + "</h2><p><a id=dlqLink href='#/search?topic=" +
      encodeURIComponent("%DLQ%" + name) + "&begin=0'>dead letters of this group</a></p><div id=groupBody></div>" +
      "<h3>Lag over time</h3><canvas id=lagChart width=720 height=180></canvas>" +
      "<h3>Reset offsets by time</h3><form class=inline id=reset><input name=topic placeholder=topic>" +
      "<input name=time type=datetime-local step=1><button>reset</button> <span id=resetOut></span></form>";
    let lag = history.lag[name];
    if (!lag) {  // the broker's own history first (a sample every 10 s), then this page's own samples
      lag = history.lag[name] = (await api("/api/history?group=" + encodeURIComponent(name))).map(s => s.lag);
    }
    every(2000, async () => {
      const g = await api("/api/groups/" + encodeURIComponent(name));
      const body = document.getElementById("groupBody");
      if (!body) return;
      lag.push(g.lag); if (lag.length > 150) lag.shift();
      body.innerHTML = "<div class=cards><div class=card>lag<b id=groupLag>" + g.lag + "</b></div></div>" +
        g.topics.map(t => "<h3>" + esc(t.topic) + " (lag " + t.lag + ", " + t.inflight + " in flight, " +
            t.lagLatencyMs + " ms behind)</h3>" +
          table([["queue", q => q.queueId, 1], ["broker offset", q => q.brokerOffset, 1],
            ["consumer offset", q => q.consumerOffset, 1], ["lag", q => q.lag, 1],
            ["in flight", q => q.inflight, 1]], t.queues)).join("");
      chart(document.getElementById("lagChart"), [lag], ["lag"]);
    });
    document.getElementById("reset").onsubmit = async e => {
      e.preventDefault();
      const f = new FormData(e.target);
      const ts = f.get("time") ? new Date(f.get("time")).getTime() : 0;
      const out = document.getElementById("resetOut");
      try {
        const r = await api("/api/groups/" + encodeURIComponent(name) + "/reset",
          { method: "POST", body: JSON.stringify({ topic: f.get("topic"), timestamp: ts }) });
        out.textContent = "reset: " + JSON.stringify(r.offsets) + ", consumers told: " + r.consumersTold;
      } catch (err) { out.textContent = err.message; out.className = "err"; }
    };
  },

  async search() {
    const p = new URLSearchParams(location.hash.split("?")[1] || "");
    $page.innerHTML = "<h2>Message search</h2><form class=inline id=searchForm>" +
      ["topic", "key", "msgId", "uniqKey"].map(k => "<input name=" + k + " placeholder=" + k + " value='" +
        esc(p.get(k) || "") + "'>").join("") +
      "<input name=begin type=datetime-local step=1> <input name=end type=datetime-local step=1>" +
      "<button>search</button></form><div id=results></div>";
    document.getElementById("searchForm").onsubmit = e => {
      e.preventDefault();
      const q = new URLSearchParams();
      for (const [k, v] of new FormData(e.target)) {
        if (!v) continue;
        q.set(k, k === "begin" || k === "end" ? new Date(v).getTime() : v);
      }
      location.hash = "#/search?" + q.toString();
    };
    if (![...p.keys()].length) return;
    const res = document.getElementById("results");
    try {
      const found = await api("/api/messages?" + p.toString());
      res.innerHTML = "<p>" + found.length + " found</p>" + table([
        ["msgId", m => "<a href='#/message/" + m.phyOffset + "'>" + esc(m.msgId) + "</a>"],
        ["topic", m => esc(m.topic)], ["queue", m => m.queueId, 1], ["offset", m => m.queueOffset, 1],
        ["keys", m => esc(m.keys)], ["tags", m => esc(m.tags)], ["stored", m => esc(fmtTime(m.storeTimestamp))],
        ["body", m => "<span class=body>" + esc((m.body || "(binary)").slice(0, 80)) + "</span>"]], found, "found");
    } catch (err) { res.innerHTML = "<p class=err>" + esc(err.message) + "</p>"; }
  },

  async message(phy) {
    const [m, s] = await Promise.all([api("/api/messages/" + phy), api("/api/storage/" + phy)]);
    const props = Object.entries(m.properties).map(([k, v]) => ({ k, v }));
    $page.innerHTML = "<h2>Message " + esc(m.msgId) + "</h2>" +
      table([["field", r => esc(r[0])], ["value", r => "<span class=mono>" + esc(r[1]) + "</span>"]], [
        ["topic", m.topic], ["queue / offset", m.queueId + " / " + m.queueOffset], ["unique key", m.uniqKey],
        ["keys", m.keys], ["tags", m.tags], ["born", fmtTime(m.bornTimestamp) + " from " + m.bornHost],
        ["stored", fmtTime(m.storeTimestamp) + " on " + m.storeHost], ["reconsume times", m.reconsumeTimes]]) +
      "<h3>Body (" + m.bodyLength + " bytes" + (m.sysFlagBits.compression ? ", stored " + m.sysFlagBits.compression +
        "-compressed in " + m.storedBodyLength : "") + ")</h3>" +
      (m.bodyNote ? "<p class=err>" + esc(m.bodyNote) + "</p>" : "") +
      "<pre id=msgBody class=mono>" + esc(m.body === null ? "(binary) " + m.bodyBase64 : m.body) + "</pre>" +
      "<h3>Properties</h3>" + table([["name", r => esc(r.k)], ["value", r => esc(r.v)]], props) +
      storageView(s) +
      (m.topic.startsWith("%DLQ%") ? "<button id=resend>resend to its topic</button> <span id=resendOut></span>" : "");
    const btn = document.getElementById("resend");
    if (btn) btn.onclick = async () => {
      const out = document.getElementById("resendOut");
      try { const r = await api("/api/messages/" + phy + "/resend", { method: "POST", body: "{}" });
        out.textContent = "stored in " + r.topic + " at " + r.phyOffset; }
      catch (err) { out.textContent = err.message; out.className = "err"; }
    };
  },

  async health() {
    const h = await api("/api/health");
    const v = h.lastVerify;
    $page.innerHTML = "<h2>Store health</h2><div class=cards>" +
      "<div class=card>disk used<b>" + (100 * h.disk.usedRatio).toFixed(1) + " %</b>" + esc(fmtBytes(h.disk.free)) + " free</div>" +
      "<div class=card>flush behind<b id=flushBehind>" + esc(fmtBytes(h.flushBehindBytes)) + "</b></div>" +
      "<div class=card>dispatch behind<b id=dispatchBehind>" + esc(fmtBytes(h.dispatchBehindBytes)) + "</b></div>" +
      "<div class=card>consume queues<b>" + h.consumeQueues + "</b></div>" +
      "<div class=card>last verify<b id=lastVerify>" + (v ? (v.ok ? "sound" : v.count + " findings") : "none") + "</b>" +
      (v ? esc(fmtTime(v.at)) : "") + " <button id=verify>verify now</button></div></div>" +
      "<h3>Commit log segments</h3>" + table([["file", s => esc(s.name)], ["from offset", s => s.fromOffset, 1],
        ["size", s => fmtBytes(s.fileSize), 1], ["written", s => fmtBytes(s.wrotePosition), 1]], h.commitlog.segments, "segments") +
      "<h3>Index files</h3>" + table([["file", f => esc(f.name)], ["keys", f => f.indexCount, 1],
        ["capacity", f => f.maxIndex, 1], ["from", f => esc(fmtTime(f.beginTimestamp))],
        ["to", f => esc(fmtTime(f.endTimestamp))]], h.indexFiles) +
      (v && v.findings.length ? "<h3>Findings</h3><pre class=mono>" + esc(v.findings.join("\n")) + "</pre>" : "");
    document.getElementById("verify").onclick = async () => {
      try { await api("/api/health/verify", { method: "POST", body: "{}" }); route(); }
      catch (err) { document.getElementById("lastVerify").textContent = err.message; }
    };
  },
};

function storageView(s) {
  const cls = n => n === "body" ? "body" : n.startsWith("properties") ? "props" : n.startsWith("topic") ? "topic" : "";
  const fields = s.fields.map(f => "<div class='field " + cls(f.name) + "' data-name='" + esc(f.name) + "' data-offset='" +
    f.offset + "' title='" + esc(f.hex) + "'><span class=n>" + esc(f.name) + "</span><span class=o>@" + f.offset +
    " +" + f.size + "</span><br>" + esc(typeof f.value === "object" ? JSON.stringify(f.value) : f.value) + "</div>").join("");
  const cq = s.consumeQueue;
  const index = s.index.map(k => "<h4>key " + esc(k.key) + (k.uniqKey ? " (unique key)" : "") + ": hash(" + esc(k.indexKey) +
    ") = " + k.keyHash + "</h4>" + k.files.map(f => "<p>" + esc(f.file) + ": slot " + f.slot + " of " + f.slotNum +
      " (byte " + f.slotPosition + ") holds item " + f.slotHead + "</p><div class=chain>" +
      f.chain.map(i => "<div class='item" + (i.match ? " match" : "") + "'>item " + i.item + "<br>hash " + i.keyHash +
        "<br>phy " + i.phyOffset + "<br>+" + i.timeDiff + " s, prev " + i.prevIndex + "</div>").join("<span class=arrow>&rarr;</span>") +
      "</div>").join("")).join("");
  return "<h3>Storage</h3><p>commit log " + esc(s.segment.file) + " at byte " + s.segment.position + " (offset " +
    s.phyOffset + "), " + s.storeSize + " bytes:</p><div class=record id=record>" + fields + "</div>" +
    (cq ? "<h3>Consume queue unit</h3>" + table([["file", u => esc(u.file)], ["position", u => u.position, 1],
      ["commit log offset", u => u.phyOffset, 1], ["size", u => u.size, 1], ["tags code", u => u.tagsCode, 1],
      ["bytes", u => "<span class=mono>" + esc(u.hex) + "</span>"]], [cq], "cqUnit") : "") +
    "<h3>Index</h3>" + (index || "<p>no keys</p>");
}

// --- routing ------------------------------------------------------------------------------------
async function route() {
  while (timers.length) clearInterval(timers.pop());
  const [path] = (location.hash || "#/cluster").slice(2).split("?");
  const [name, arg] = path.split("/");
  const page = pages[name] ? name : "cluster";
  for (const a of document.querySelectorAll("header nav a")) a.classList.toggle("active", a.id === "nav-" + page ||
    (a.id === "nav-topics" && page === "topic") || (a.id === "nav-groups" && page === "group") ||
    (a.id === "nav-search" && page === "message"));
  $page.innerHTML = "<p>loading...</p>";
  try { await pages[page](arg === undefined ? undefined : decodeURIComponent(arg)); }
  catch (err) { $page.innerHTML = "<p class=err>" + esc(err.message) + "</p>"; }
}
const tokenInput = document.getElementById("token");
tokenInput.value = sessionStorage.getItem("rmqstoreToken") || "";
tokenInput.onchange = () => sessionStorage.setItem("rmqstoreToken", tokenInput.value);
window.addEventListener("hashchange", route);
api("/api/broker").then(b => { document.getElementById("brokerName").textContent = b.brokerName + " @ " + b.address; });
route();
