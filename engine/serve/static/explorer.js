// The question explorer: pick or type a question, answer it with a method (POST /v1/answer),
// and draw the record's graph (POST /v1/explorer/graph) with cytoscape. Text from the server is
// only ever set as textContent or as cytoscape data, never as HTML.
"use strict";

const $ = (id) => document.getElementById(id);
const state = { picked: null, questions: [], methods: {} };

const COLORS = {
  topic: "#2563eb", answer: "#16a34a", gold: "#d97706", variable: "#9ca3af",
  node: "#e5e7eb", explored: "#cbd5e1", chosen: "#dc2626", text: "#111827", muted: "#6b7280",
};

const STYLE = [
  { selector: "node", style: {
    label: "data(label)", "background-color": COLORS.node, "border-color": "#9ca3af", "border-width": 1,
    width: 20, height: 20, "font-size": 11, color: COLORS.text, "text-valign": "bottom", "text-margin-y": 4,
    "text-wrap": "ellipsis", "text-max-width": "160px",
  } },
  { selector: "node.answer", style: { "background-color": COLORS.answer, width: 26, height: 26 } },
  // a topic the method also answered with stays a topic
  { selector: "node.topic", style: { "background-color": COLORS.topic, width: 30, height: 30, "font-weight": "bold" } },
  { selector: "node.gold", style: { "border-color": COLORS.gold, "border-width": 5 } },
  { selector: "node.variable", style: { shape: "round-rectangle", "background-color": COLORS.variable, width: 16, height: 16 } },
  { selector: "edge", style: {
    "curve-style": "bezier", "target-arrow-shape": "triangle", width: 1.5, "line-color": COLORS.explored,
    "target-arrow-color": COLORS.explored, label: "data(relation)", "font-size": 9, color: COLORS.muted,
    "text-rotation": "autorotate", "text-background-color": "#ffffff", "text-background-opacity": 0.8,
    "text-background-padding": "1px",
  } },
  // the gold path glows under whatever else an edge is: explored (grey), chosen (red) or neither (orange)
  { selector: "edge.gold", style: {
    "line-color": COLORS.gold, "target-arrow-color": COLORS.gold, width: 3, "underlay-color": COLORS.gold,
    "underlay-padding": 5, "underlay-opacity": 0.35,
  } },
  { selector: "edge.gold.explored", style: { "line-color": COLORS.explored, "target-arrow-color": COLORS.explored } },
  { selector: "edge.chosen", style: { "line-color": COLORS.chosen, "target-arrow-color": COLORS.chosen, width: 4, "z-index": 10, color: COLORS.text } },
];

function headers() {
  const h = { "Content-Type": "application/json" };
  const token = $("token").value.trim();
  if (token) h.Authorization = `Bearer ${token}`;
  return h;
}

async function api(method, path, body) {
  const response = await fetch(path, { method, headers: headers(), body: body === undefined ? undefined : JSON.stringify(body) });
  const data = await response.json().catch(() => ({ detail: response.statusText }));
  if (!response.ok) throw new Error(`${response.status} ${data.error || ""}: ${data.detail || response.statusText}`);
  return data;
}

function setStatus(stateName, text) {
  $("status").dataset.state = stateName;
  $("status").textContent = text;
}

const list = (text) => text.split(",").map((s) => s.trim()).filter(Boolean);

// ------------------------------------------------------------------ questions
async function loadSources() {
  const { sources } = await api("GET", "/v1/explorer/sources");
  const select = $("source");
  select.replaceChildren(...sources.map((name) => new Option(name, name)));
  if (!sources.length) select.replaceChildren(new Option("no question sets here: type a question", ""));
  await loadQuestions();
}

async function loadQuestions() {
  const source = $("source").value;
  const box = $("questions");
  if (!source) { box.replaceChildren(); return; }
  const query = new URLSearchParams({ source, search: $("search").value, limit: "50" });
  const answer = await api("GET", `/v1/explorer/questions?${query}`);
  state.questions = answer.questions;
  box.replaceChildren(...answer.questions.map((q, i) => {
    const item = document.createElement("li");
    item.textContent = q.question;
    item.title = `${q.id}: ${q.answers.join(", ")}`;
    item.dataset.index = String(i);
    item.addEventListener("click", () => pick(i));
    return item;
  }));
}

function pick(i) {
  const q = state.questions[i];
  state.picked = q;
  for (const item of $("questions").children) item.classList.toggle("picked", item.dataset.index === String(i));
  $("question").value = q.question;
  $("topics").value = q.topics.join(", ");
  $("gold").value = q.answers.join(", ");
  $("gold-path").value = (q.path || []).join(", ");
}

// ------------------------------------------------------------------ methods
async function loadMethods() {
  const methods = await api("GET", "/v1/methods");
  state.methods = Object.fromEntries(methods.map((m) => [m.name, m]));
  $("method").replaceChildren(...methods.map((m) => new Option(m.name, m.name)));
  showMethod();
}

function showMethod() {
  const m = state.methods[$("method").value];
  if (!m) return;
  $("method-help").textContent = m.help;
  const settable = m.options.filter((o) => o.settable).map((o) => `${o.name}=${JSON.stringify(o.default)}`);
  $("method-options").textContent = settable.length ? `options (JSON): ${settable.join(", ")}` : "";
}

// ------------------------------------------------------------------ answering and drawing
function asked() {
  const question = $("question").value.trim();
  if (!question) throw new Error("type a question or pick one");
  let config;
  try { config = JSON.parse($("config").value || "{}"); } catch (e) { throw new Error(`options: not JSON (${e.message})`); }
  const gold = list($("gold").value);
  const picked = state.picked && state.picked.question === question ? state.picked : null;
  const q = { question, topics: list($("topics").value) };
  if (picked && gold.join() === picked.answers.join()) {
    Object.assign(q, { id: picked.id, answers: picked.answers, answer_ids: picked.answer_ids });
  } else {
    q.answers = gold;
  }
  const path = list($("gold-path").value);
  const forward = picked && picked.path && path.join() === picked.path.join() ? picked.path_forward : null;
  return { method: $("method").value, questions: [q], config, path: path.length ? path : null, path_forward: forward };
}

async function answer() {
  const button = $("answer");
  let request;
  try { request = asked(); } catch (e) { setStatus("error", e.message); return; }
  button.disabled = true;
  setStatus("answering", `answering with ${request.method}…`);
  try {
    const answered = await api("POST", "/v1/answer", { method: request.method, questions: request.questions, config: request.config });
    const record = answered.predictions[0];
    const view = await api("POST", "/v1/explorer/graph",
      { method: answered.method, record, path: request.path, path_forward: request.path_forward });
    window.explorer = { answer: answered, record, view };
    showAnswer(answered, record);
    draw(view);
    setStatus("done", `${view.nodes.length} nodes, ${view.edges.length} edges`);
  } catch (e) {
    setStatus("error", e.message);
  } finally {
    button.disabled = false;
  }
}

function draw(view) {
  const elements = [
    ...view.nodes.map((n) => ({ group: "nodes", data: { id: n.id, label: n.label, roles: n.roles }, classes: n.roles.join(" ") })),
    ...view.edges.map((e) => ({ group: "edges", data: { id: e.id, source: e.source, target: e.target, relation: e.relation, roles: e.roles },
      classes: e.roles.join(" ") })),
  ];
  window.cy.resize();  // the answer above the graph may have changed its size
  window.cy.elements().remove();
  window.cy.add(elements);
  const roots = window.cy.nodes(".topic");
  const layout = roots.length && view.edges.length
    ? { name: "breadthfirst", roots, directed: false, spacingFactor: 1.1, padding: 30, animate: false }
    : { name: "cose", padding: 30, animate: false };
  window.cy.layout(layout).run();
  window.cy.fit(undefined, 30);
  $("cut").hidden = !view.truncated;
}

function showAnswer(answered, record) {
  $("result").hidden = false;
  $("predicted").textContent = record.prediction.length ? record.prediction.join(", ") : "(none)";
  const gold = record.answers.length ? record.answers : record.answer_ids;
  $("gold-answers").textContent = gold.length ? gold.join(", ") : "(not given)";
  const s = answered.seconds;
  $("times").textContent = `store ${s.store.toFixed(3)} s · model ${s.model.toFixed(3)} s · total ${s.total.toFixed(3)} s`;
  $("warning").hidden = !record.warning;
  $("warning").textContent = record.warning || "";
}

// ------------------------------------------------------------------ start
async function start() {
  window.cy = cytoscape({ container: $("graph"), style: STYLE });
  $("token").value = sessionStorage.getItem("kgqa-token") || "";
  $("token").addEventListener("change", () => { sessionStorage.setItem("kgqa-token", $("token").value); init(); });
  $("source").addEventListener("change", () => loadQuestions().catch((e) => setStatus("error", e.message)));
  let typing;
  $("search").addEventListener("input", () => {
    clearTimeout(typing);
    typing = setTimeout(() => loadQuestions().catch((e) => setStatus("error", e.message)), 250);
  });
  $("method").addEventListener("change", showMethod);
  $("answer").addEventListener("click", answer);
  await init();
}

async function init() {
  try {
    const health = await fetch("/v1/health").then((r) => r.json());
    $("store").textContent = `${health.dialect} store · ${health.status}`;
    await loadMethods();
    await loadSources();
    setStatus("ready", "");
  } catch (e) {
    setStatus("error", e.message);
  }
}

start();
