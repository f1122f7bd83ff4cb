// lettaq web chat: everything shown comes from the chat's reply stream
// (docs/reply-events.md), read over Server-Sent Events from its start on load.
"use strict";
(() => {
  const $ = (id) => document.getElementById(id);
  const log = $("log"), text = $("text"), agentSel = $("agent"), agentID = $("agent-id");
  const STORE = "lettaq.webchat"; // {chat, agent}: shared by the tabs of this origin
  let cfg = { agents: [], any_agent: false, journal_url: "" };
  let chat = "", agent = "", es = null, lastID = "";
  let turns = new Map();   // task id → turn
  let pending = new Map(); // message id → the user's bubble, sent and not yet in the stream
  let shown = new Set();   // notify events shown (by task id and seq, or entry id)
  let images = [];

  const rid = () => {
    if (crypto.randomUUID) return crypto.randomUUID();
    const a = crypto.getRandomValues(new Uint8Array(16));
    return Array.from(a, (b) => b.toString(16).padStart(2, "0")).join("");
  };
  const el = (tag, cls, txt) => {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (txt !== undefined) e.textContent = txt;
    return e;
  };
  const imagesWord = (n) => n + (n === 1 ? " image" : " images");
  const scroll = () => { log.scrollTop = log.scrollHeight; };
  const notice = (msg) => { $("notice").textContent = msg || ""; $("notice").hidden = !msg; };

  async function post(path, body) {
    const r = await fetch(path, { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body) });
    let data = {};
    try { data = await r.json(); } catch (_) { /* not JSON */ }
    return { ok: r.ok, status: r.status, data };
  }

  // ---- the chat and its agent

  function save() { localStorage.setItem(STORE, JSON.stringify({ chat, agent })); }

  function load() {
    let s = {};
    try { s = JSON.parse(localStorage.getItem(STORE) || "{}"); } catch (_) { /* start anew */ }
    const known = cfg.agents.some((a) => a.name === s.agent) || (cfg.any_agent && /^agent-/.test(s.agent || ""));
    if (!s.chat || !known) {
      s = { chat: rid(), agent: s.agent && known ? s.agent : (cfg.agents[0] ? cfg.agents[0].name : "") };
    }
    chat = s.chat; agent = s.agent;
    save();
  }

  function showAgent() {
    const named = cfg.agents.some((a) => a.name === agent);
    agentSel.value = named ? agent : "*";
    agentID.hidden = named;
    if (!named) agentID.value = agent;
  }

  function newChat(a) {
    chat = rid(); agent = a; save(); reset();
  }

  function reset() {
    if (es) es.close();
    turns = new Map(); pending = new Map(); shown = new Set(); lastID = "";
    log.replaceChildren();
    showAgent();
    connect("");
  }

  // ---- the stream

  function connect(after) {
    if (es) es.close();
    let url = "events?chat=" + encodeURIComponent(chat);
    if (after) url += "&after=" + encodeURIComponent(after);
    const mine = chat;
    es = new EventSource(url);
    es.onopen = () => { notice(""); document.body.dataset.connected = "1"; };
    es.onmessage = (e) => {
      if (chat !== mine) return;
      lastID = e.lastEventId || lastID;
      const m = JSON.parse(e.data);
      apply(m.event, m.said);
      refreshStop();
    };
    es.onerror = () => {
      document.body.dataset.connected = "";
      notice("Connection lost: reconnecting…");
      // The browser reconnects by itself (with Last-Event-ID) unless the
      // server refused the stream; then try again from the last id held.
      if (es.readyState === EventSource.CLOSED) setTimeout(() => { if (chat === mine) connect(lastID); }, 2000);
    };
  }

  function isFinal(ev) {
    return ev.type === "answer" || ev.type === "approval_required" || (ev.type === "error" && ev.data.permanent);
  }

  function turnOf(id) {
    let t = turns.get(id);
    if (t) return t;
    t = { id, seq: 0, final: false, text: "", narration: "", tools: [] };
    t.el = el("div", "msg agent");
    t.el.dataset.task = id;
    t.status = el("div", "status");
    t.answer = el("div", "answer");
    t.extra = el("div", "extra");
    t.meta = el("div", "meta");
    if (cfg.journal_url) {
      const a = el("a", "", "journal");
      a.href = cfg.journal_url + encodeURIComponent(id);
      a.target = "_blank"; a.rel = "noopener";
      a.title = "what lettaq recorded of this turn";
      t.meta.append(a);
    }
    t.el.append(t.status, t.answer, t.extra, t.meta);
    log.append(t.el);
    turns.set(id, t);
    return t;
  }

  function setStatus(t, s, busy) {
    t.status.textContent = s;
    t.status.classList.toggle("dots", !!busy && !s.endsWith("…"));
  }

  function note(t, s) { const n = el("span", "", " · " + s); t.meta.append(n); }

  const phases = {
    queued: "queued…", connecting: "connecting to the agent…", streaming: "thinking…", thinking: "thinking…",
    tool_running: "running a tool…", recovering: "the stream was lost: recovering the same run…",
    continuing: "continuing the same run…", awaiting_approval: "waiting: answer the approval request above first",
    rate_limited: "the agent is rate limited: waiting…", letta_deploying: "the agent's server is restarting: waiting…",
  };

  function userBubble(ev, said) {
    const b = pending.get(ev.message_id);
    if (b) { // sent from this tab: its bubble is in place
      pending.delete(ev.message_id);
      b.classList.remove("pending");
      b.querySelector(".meta").textContent = said && said.images ? imagesWord(said.images) : "";
      return;
    }
    if (!said) return;
    const m = el("div", "msg me", said.text);
    m.dataset.message = ev.message_id;
    if (said.images) m.append(el("div", "meta", imagesWord(said.images)));
    log.append(m);
  }

  function apply(ev, said) {
    const d = ev.data || {};
    if (ev.type === "notify") {
      const key = ev.task_id ? ev.task_id + "#" + ev.seq : ev.id;
      if (shown.has(key)) return;
      shown.add(key);
      log.append(el("div", "msg agent notify", d.text || ""));
      scroll();
      return;
    }
    if (!ev.task_id) return;
    const isNew = !turns.has(ev.task_id);
    if (ev.type === "accepted" && isNew) userBubble(ev, said);
    const t = turnOf(ev.task_id);
    // reply-events.md "Seq": one final event per turn, nothing after it;
    // progress at or below the seq shown is a repeat.
    if (t.final) return;
    if (!isFinal(ev) && ev.seq <= t.seq) return;
    t.seq = Math.max(t.seq, ev.seq);
    switch (ev.type) {
      case "accepted":
        if (d.approval && d.approval.request_task_id) answered(d.approval);
        setStatus(t, d.position > 0 ? "waiting: " + d.position + (d.position === 1 ? " message" : " messages") + " ahead" : "queued…", true);
        break;
      case "phase":
        if (d.phase === "recovering" && !t.recovered) { t.recovered = true; note(t, "stream lost, same run recovered"); }
        if (t.tools.length && d.phase !== "recovering" && d.phase !== "continuing") break; // the tool's line says more
        if (t.text && (d.phase === "thinking" || d.phase === "streaming")) { setStatus(t, ""); break; }
        setStatus(t, phases[d.phase] || d.phase, true);
        break;
      case "tool": {
        const tool = d.tool || {};
        if (tool.status === "call" || !tool.status) {
          t.tools.push(tool.name);
          setStatus(t, "⚙ " + tool.name + "…", true);
        } else {
          t.tools = t.tools.filter((n) => n !== tool.name);
          setStatus(t, "⚙ " + tool.name + ": " + tool.status, false);
          note(t, "tool " + tool.name);
        }
        break;
      }
      case "answer_delta":
        if (d.narration) {
          t.narration += d.text || "";
          if (!t.tools.length) setStatus(t, "thinking: " + t.narration.slice(-80), true);
          break;
        }
        t.tools = [];
        t.text += d.text || "";
        t.answer.textContent = t.text;
        setStatus(t, "");
        t.answer.classList.add("dots");
        break;
      case "answer":
        t.final = true;
        t.el.dataset.final = "1";
        t.text = d.text || "";
        t.answer.textContent = t.text;
        t.answer.classList.remove("dots");
        setStatus(t, "");
        if (d.answered_by) note(t, "answered together with another message");
        break;
      case "approval_required":
        t.final = true;
        t.el.dataset.final = "1";
        t.answer.classList.remove("dots");
        setStatus(t, "");
        approval(t, d.approval || {});
        break;
      case "error":
        if (!d.permanent) { setStatus(t, "an attempt failed, trying again: " + (d.text || ""), true); break; }
        t.final = true;
        t.el.dataset.final = "1";
        t.answer.classList.remove("dots");
        if (d.stop_reason === "cancelled") {
          if (d.text) { t.text = d.text; t.answer.textContent = t.text; }
          setStatus(t, "Stopped.");
          t.status.className = "status stopped";
        } else {
          setStatus(t, "Sorry, this message failed: " + (d.text || "unknown error"));
          t.status.className = "status error";
        }
        break;
    }
    scroll();
  }

  // ---- approvals

  function approval(t, ap) {
    const box = el("div", "approval");
    box.dataset.request = ap.request_task_id || t.id;
    const calls = (ap.calls || []).map((c) => c.name + "(" + (c.arguments || "") + ")").join(", ");
    box.append(el("div", "", "The agent asks to run " + (calls || "a tool") + "."));
    const yes = el("button", "approve", "Approve"), no = el("button", "deny", "Deny");
    yes.type = no.type = "button";
    const word = el("div", "decision");
    const press = async (approve) => {
      yes.disabled = no.disabled = true; // a second press would be the same answer anyway
      word.textContent = approve ? "Approving…" : "Denying…";
      const r = await post("approve", { chat, request: box.dataset.request, approve }).catch(() => ({ ok: false, status: 0, data: {} }));
      if (!r.ok) {
        word.textContent = "Could not answer: " + (r.data.error || "the server did not answer");
        if (r.status === 0 || r.status >= 500) yes.disabled = no.disabled = false;
      }
    };
    yes.onclick = () => press(true);
    no.onclick = () => press(false);
    box.append(yes, no, word);
    if (ap.expires_at) box.title = "denied automatically at " + new Date(ap.expires_at).toLocaleString();
    t.extra.append(box);
  }

  // answered shows an approval request's answer (the accepted event of its
  // answer turn): from this tab, another, or the expiry.
  function answered(a) {
    const box = log.querySelector('.approval[data-request="' + CSS.escape(a.request_task_id) + '"]');
    if (!box) return;
    box.querySelectorAll("button").forEach((b) => b.remove());
    const word = box.querySelector(".decision");
    word.textContent = a.cause === "expired" ? "Expired: denied." : a.cause === "moved_on" ? "Denied: the conversation moved on."
      : a.decision === "approved" ? "✓ Approved." : a.decision === "denied" ? "✗ Denied." : "Answered.";
  }

  // ---- sending

  function open() { return [...turns.values()].some((t) => !t.final); }
  function refreshStop() { $("stop").disabled = !open(); }

  async function send(body, bubble) {
    for (let i = 0; ; i++) {
      const r = await post("send", body).catch(() => null);
      if (r && r.ok) return;
      if (r && r.status < 500) {
        bubble.querySelector(".meta").textContent = "not sent: " + (r.data.error || r.status);
        bubble.classList.add("error");
        pending.delete(body.message_id);
        return;
      }
      // The same message id again: one turn however often it arrives.
      bubble.querySelector(".meta").textContent = "not sent yet, trying again…";
      await new Promise((ok) => setTimeout(ok, Math.min(8000, 500 * 2 ** i)));
      if (!pending.has(body.message_id)) return;
    }
  }

  $("composer").addEventListener("submit", (e) => {
    e.preventDefault();
    const words = text.value.trim();
    if (!words && !images.length) return;
    const body = { chat, agent, message_id: rid(), text: words, images };
    const b = el("div", "msg me pending", words);
    b.dataset.message = body.message_id;
    b.append(el("div", "meta", "sending…" + (images.length ? " (" + imagesWord(images.length) + ")" : "")));
    log.append(b);
    pending.set(body.message_id, b);
    scroll();
    text.value = ""; images = []; $("image").value = ""; $("attached").textContent = "";
    send(body, b);
  });

  text.addEventListener("keydown", (e) => {
    if (e.key === "Enter" && !e.shiftKey && !e.isComposing) {
      e.preventDefault();
      $("composer").requestSubmit();
    }
  });

  $("image").addEventListener("change", async (e) => {
    const files = [...e.target.files].slice(0, 4);
    const read = (f) => new Promise((ok, fail) => {
      const r = new FileReader();
      r.onload = () => ok({ media_type: f.type, data: String(r.result).split(",")[1] });
      r.onerror = fail;
      r.readAsDataURL(f);
    });
    const big = files.find((f) => f.size > 1 << 20);
    if (big) { notice(big.name + " is larger than 1 MiB: not attached"); return; }
    images = await Promise.all(files.map(read));
    $("attached").textContent = images.length ? imagesWord(images.length) + " attached" : "";
  });

  $("stop").addEventListener("click", async () => {
    const r = await post("stop", { chat, agent }).catch(() => null);
    if (!r || (!r.ok && r.status !== 404)) notice("Could not stop: " + ((r && r.data.error) || "the server did not answer"));
  });

  // ---- the agent picker

  agentSel.addEventListener("change", () => {
    if (agentSel.value === "*") { agentID.hidden = false; agentID.focus(); return; }
    newChat(agentSel.value);
  });
  agentID.addEventListener("change", () => { if (agentID.value.trim()) newChat(agentID.value.trim()); });
  $("new-chat").addEventListener("click", () => newChat(agent));

  // Another tab started a new chat: follow it.
  window.addEventListener("storage", (e) => {
    if (e.key !== STORE) return;
    const s = JSON.parse(e.newValue || "{}");
    if (s.chat && s.chat !== chat) { chat = s.chat; agent = s.agent; reset(); }
  });

  fetch("config").then((r) => r.json()).then((c) => {
    cfg = c;
    for (const a of cfg.agents) { const o = el("option", "", a.name); o.value = a.name; agentSel.append(o); }
    if (cfg.any_agent) { const o = el("option", "", "another agent (id)…"); o.value = "*"; agentSel.append(o); }
    load();
    reset();
    text.focus();
  }).catch(() => notice("Could not load the page's configuration: reload to try again."));
})();
