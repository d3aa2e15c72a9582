// The approval page. Everything shown is set with textContent: what an agent
// asked for is data, never markup.
"use strict";

// The sign-in's CSRF token, kept in this origin's session storage: a cookie
// reaches every port of localhost, this does not.
let csrf = sessionStorage.getItem("warden-csrf") || "";
let signedInAs = "";

function $(id) { return document.getElementById(id); }

function say(text) { $("status").textContent = text; }

async function api(path, body) {
  const init = { method: body === undefined ? "GET" : "POST", credentials: "same-origin", headers: { "X-Warden-CSRF": csrf } };
  if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const response = await fetch(path, init);
  const answer = await response.json().catch(() => ({ error: `HTTP ${response.status}` }));
  if (!response.ok) {
    const error = new Error(answer.error || `HTTP ${response.status}`);
    error.status = response.status;
    throw error;
  }
  return answer;
}

// The browser's passkey prompt for a request's options (webauthn-rs JSON).
async function assert(options) {
  const publicKey = PublicKeyCredential.parseRequestOptionsFromJSON(options.publicKey);
  const credential = await navigator.credentials.get({ publicKey });
  return credential.toJSON();
}

async function enroll() {
  const token = location.hash.slice(1);
  if (!token) { say("This link has no enrolment token: ask an admin for a new one."); return; }
  history.replaceState(null, "", "/enroll");
  try {
    say("Starting…");
    const started = await api("/api/enroll/start", { token });
    const publicKey = PublicKeyCredential.parseCreationOptionsFromJSON(started.options.publicKey);
    const credential = await navigator.credentials.create({ publicKey });
    const done = await api("/api/enroll/finish", { token, credential: credential.toJSON() });
    say(`Enrolled: approver ${done.name}, passkey ${done.key_id}. It counts once your admin confirms it: ` +
        `tell them this key id (wardenctl approvers confirm ${done.name} ${done.key_id}).`);
    $("enroll-button").hidden = true;
  } catch (e) {
    say(`Not enrolled: ${e.message}`);
  }
}

async function signIn() {
  try {
    say("Waiting for your passkey…");
    const started = await api("/api/signin/start", {});
    const credential = await assert(started.options);
    const me = await api("/api/signin/finish", { credential });
    csrf = me.csrf;
    sessionStorage.setItem("warden-csrf", csrf);
    say("");
    await show(me.name);
  } catch (e) {
    say(`Not signed in: ${e.message}`);
  }
}

function field(list, name, value) {
  if (value === undefined || value === null || value === "" || (Array.isArray(value) && value.length === 0)) return;
  const dt = document.createElement("dt");
  dt.textContent = name;
  const dd = document.createElement("dd");
  dd.textContent = Array.isArray(value) ? value.join(", ") : String(value);
  list.append(dt, dd);
}

// The deadline in the reader's local time, with what is left.
function deadline(rfc3339) {
  const at = new Date(rfc3339);
  if (Number.isNaN(at.getTime())) return rfc3339;
  const left = Math.max(0, Math.round((at.getTime() - Date.now()) / 1000));
  const wait = left >= 60 ? `${Math.floor(left / 60)}m${String(left % 60).padStart(2, "0")}s` : `${left}s`;
  return `${at.toLocaleString()}, in ${wait}`;
}

function card(approval) {
  const item = document.createElement("li");
  item.className = "approval";
  item.dataset.approvalId = approval.approval_id;
  const title = document.createElement("h3");
  title.textContent = `${approval.actor.user} wants ${approval.action} ${approval.resource}`;
  item.append(title);
  if (approval.passkey_policies.length > 0) {
    const badge = document.createElement("span");
    badge.className = "passkey";
    badge.textContent = `passkey required: ${approval.passkey_policies.join(", ")}`;
    item.append(badge);
  }
  const facts = document.createElement("dl");
  field(facts, "agent", `${approval.actor.agent} · session ${approval.actor.session}`);
  field(facts, "why", approval.justification);
  field(facts, "policies", approval.policy_ids);
  field(facts, "approvers", approval.approvers.length ? approval.approvers : ["any approver"]);
  field(facts, "expires", deadline(approval.expires_at));
  field(facts, "harness", approval.harness);
  field(facts, "request", approval.request_hash.slice(0, 12));
  item.append(facts);
  const reasons = document.createElement("ul");
  reasons.className = "reasons";
  for (const reason of approval.reasons) {
    const line = document.createElement("li");
    line.textContent = reason;
    reasons.append(line);
  }
  item.append(reasons);
  const request = document.createElement("pre");
  request.textContent = JSON.stringify(approval.request, null, 2);
  item.append(request);
  // Shown, not hidden: what would leave if this is approved.
  if (approval.credentials.length > 0) {
    const marked = document.createElement("div");
    marked.className = "credentials";
    const heading = document.createElement("strong");
    heading.textContent = "Looks like a credential, and would leave with this request:";
    const list = document.createElement("ul");
    for (const written of approval.credentials) {
      const line = document.createElement("li");
      const code = document.createElement("code");
      code.textContent = written;
      line.append(code);
      list.append(line);
    }
    marked.append(heading, list);
    item.append(marked);
  }
  const actions = document.createElement("div");
  actions.className = "actions";
  const note = document.createElement("input");
  note.placeholder = "note (told to the agent on a denial)";
  note.className = "note";
  const approve = document.createElement("button");
  approve.className = "approve";
  approve.textContent = "Approve";
  const deny = document.createElement("button");
  deny.className = "deny";
  deny.textContent = "Deny";
  const result = document.createElement("span");
  result.className = "result";
  approve.addEventListener("click", () => resolve(approval.approval_id, true, note.value, result));
  deny.addEventListener("click", () => resolve(approval.approval_id, false, note.value, result));
  actions.append(note, approve, deny, result);
  item.append(actions);
  return item;
}

async function resolve(id, approve, note, result) {
  try {
    result.textContent = "Asking the monitor…";
    const started = await api(`/api/approvals/${encodeURIComponent(id)}/start`, { approve });
    // What the passkey is about to sign, as the monitor bound it.
    result.textContent = `Your passkey now signs: ${approve ? "approve" : "deny"} ${started.approval.approval_id} ` +
      `(request ${started.approval.request_hash.slice(0, 12)})`;
    const credential = await assert(started.options);
    const done = await api(`/api/approvals/${encodeURIComponent(id)}/finish`, { ceremony: started.ceremony, credential, note });
    result.textContent = `${done.state} (audit #${done.audit_seq})`;
  } catch (e) {
    result.textContent = `Not resolved: ${e.message}`;
  }
}

async function show(name) {
  signedInAs = name;
  $("who").textContent = `signed in as ${name}`;
  $("sign-in").hidden = true;
  $("sign-out").hidden = false;
  $("pending").hidden = false;
  const { approvals } = await api("/api/approvals");
  // `#ID` (the link a notification opens) shows that approval alone.
  const focus = decodeURIComponent(location.hash.slice(1));
  const shown = focus ? approvals.filter((a) => a.approval_id === focus) : approvals;
  const list = $("approvals");
  list.replaceChildren(...shown.map(card));
  $("count").textContent = focus ? "" : `(${approvals.length})`;
  $("all").hidden = !focus;
  $("empty").textContent = focus ? "This approval no longer waits." : "Nothing waits for an approver.";
  $("empty").hidden = shown.length > 0;
}

async function approvalsPage() {
  $("sign-in-button").addEventListener("click", signIn);
  window.addEventListener("hashchange", () => { if (signedInAs) show(signedInAs); });
  $("sign-out").addEventListener("click", async () => {
    await api("/api/signout", {}).catch(() => {});
    sessionStorage.removeItem("warden-csrf");
    location.reload();
  });
  try {
    const me = await api("/api/me");
    await show(me.name);
  } catch (e) {
    $("sign-in").hidden = false;
    if (e.status !== 401) say(e.message);
  }
}

document.addEventListener("DOMContentLoaded", () => {
  if (document.body.dataset.page === "enroll") {
    $("enroll-button").addEventListener("click", enroll);
  } else {
    approvalsPage();
  }
});
