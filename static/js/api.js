// REST calls of the chat page. Every state-changing request carries Django's CSRF token
// (X-CSRFToken, read from the csrftoken cookie or the page's hidden form field).

export class ApiError extends Error {
  constructor(message, status) {
    super(message);
    this.status = status;
  }
}

export function csrfToken() {
  const match = document.cookie.match(/(?:^|;\s*)csrftoken=([^;]+)/);
  if (match) return decodeURIComponent(match[1]);
  const field = document.querySelector("input[name=csrfmiddlewaretoken]");
  return field ? field.value : "";
}

async function request(method, path, body) {
  const headers = { Accept: "application/json" };
  const init = { method, headers, credentials: "same-origin" };
  if (method !== "GET") headers["X-CSRFToken"] = csrfToken();
  if (body instanceof FormData) {
    init.body = body;
  } else if (body !== undefined) {
    headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  let response;
  try {
    response = await fetch(path, init);
  } catch (err) {
    throw new ApiError(`cannot reach the Navi server (${err.message}); check it is running, then retry`, 0);
  }
  if (response.status === 401 || (response.redirected && response.url.includes("/login/"))) {
    window.location.assign(`/login/?next=${encodeURIComponent(location.pathname + location.hash)}`);
    throw new ApiError("your login expired; log in again", 401);
  }
  let data = {};
  try {
    data = await response.json();
  } catch {
    data = {};
  }
  if (!response.ok) {
    const detail = data.error || `${method} ${path} failed with HTTP ${response.status}`;
    throw new ApiError(detail, response.status);
  }
  if (method !== "GET") saved();
  return data;
}

/** A change went through: the page's error toasts about earlier attempts are stale now. */
export function saved() {
  document.dispatchEvent(new CustomEvent("navi:saved"));
}

export const api = {
  mcpServers: () => request("GET", "/mcp/servers"),
  mcpPrompt: (serverId, name, args) => request("POST", `/mcp/servers/${serverId}/prompt`, { name, arguments: args }),
  sessions: () => request("GET", "/sessions").then((d) => d.sessions),
  search: (q) => request("GET", `/sessions?q=${encodeURIComponent(q)}`).then((d) => d.sessions),
  importSession: (data) => request("POST", "/sessions/import", data),
  setProfile: (id, profileId) => request("PATCH", `/sessions/${id}`, { profile_id: profileId }),
  setModel: (id, model) => request("PATCH", `/sessions/${id}`, { model }),
  models: () => request("GET", "/models"),
  settings: () => request("GET", "/settings"),
  saveSettings: (changes) => request("PATCH", "/settings", changes),
  tokens: () => request("GET", "/settings/tokens").then((d) => d.tokens),
  createToken: (name) => request("POST", "/settings/tokens", { name }),
  revokeToken: (id) => request("DELETE", `/settings/tokens/${id}`),
  notifyTargets: () => request("GET", "/settings/notify"),
  addNotifyTarget: (target) => request("POST", "/settings/notify", target),
  removeNotifyTarget: (id) => request("DELETE", `/settings/notify/${id}`),
  testNotifyTarget: (id) => request("POST", `/settings/notify/${id}/test`),
  telegram: () => request("GET", "/settings/telegram"),
  linkTelegram: () => request("POST", "/settings/telegram/link"),
  unlinkTelegram: () => request("DELETE", "/settings/telegram"),
  memory: () => request("GET", "/memory"),
  restoreFileVersion: (versionId) => request("POST", `/files/versions/${encodeURIComponent(versionId)}/restore`),
  addFact: (category, key, value) => request("POST", "/memory", { category, key, value }),
  saveFact: (id, value) => request("PATCH", `/memory/facts/${id}`, { value }),
  forgetFact: (id) => request("DELETE", `/memory/facts/${id}`),
  confirmFact: (id) => request("POST", `/memory/facts/${id}/confirm`),
  session: (id) => request("GET", `/sessions/${id}`),
  passage: (id) => request("GET", `/knowledge/passages/${encodeURIComponent(id)}`),
  olderMessages: (id, before) => request("GET", `/sessions/${id}?before=${encodeURIComponent(before)}`),
  // New chat: the newest chat is reused while it is still empty (a script's POST always creates).
  createSession: (profileId) => request("POST", "/sessions", { profile_id: profileId, reuse_empty: true }),
  rename: (id, title) => request("PATCH", `/sessions/${id}`, { title }),
  pin: (id, pinned) => request("PATCH", `/sessions/${id}/pin`, { pinned }),
  remove: (id) => request("DELETE", `/sessions/${id}`),
  stop: (id) => request("POST", `/sessions/${id}/stop`),
  selectVersion: (id, messageId, n) => request("POST", `/sessions/${id}/messages/${messageId}/versions/${n}/select`),
  context: (id) => request("GET", `/sessions/${id}/context`),
  profiles: () => request("GET", "/agents/profiles").then((d) => d.profiles),
  tools: () => request("GET", "/agents/tools").then((d) => d.tools),
  upload(id, file) {
    const form = new FormData();
    form.append("file", file, file.name);
    return request("POST", `/sessions/${id}/files`, form);
  },
};
