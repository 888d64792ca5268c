// Navi's service worker (served at /sw.js, scope "/"): shows a Web Push message as a notification,
// and a click opens — or focuses — the chat it is about. It caches nothing: the chat is live.
"use strict";

self.addEventListener("install", () => self.skipWaiting());
self.addEventListener("activate", (event) => event.waitUntil(self.clients.claim()));

// Only this site's own pages are opened from a notification, whatever the payload says.
function sameOriginUrl(url) {
  try {
    const parsed = new URL(url || "/", self.location.origin);
    return parsed.origin === self.location.origin ? parsed.href : `${self.location.origin}/`;
  } catch (err) {
    return `${self.location.origin}/`;
  }
}

function readPayload(data) {
  if (!data) return {};
  try {
    return data.json() || {};
  } catch (err) {
    return { body: data.text() };
  }
}

self.addEventListener("push", (event) => {
  const data = readPayload(event.data);
  const options = {
    body: String(data.body || ""),
    icon: "/static/icons/navi-192.png",
    badge: "/static/icons/navi-192.png",
    data: { url: sameOriginUrl(data.url) },
  };
  if (data.tag) {
    options.tag = String(data.tag);
    options.renotify = true; // a newer message with the same tag still alerts
  }
  event.waitUntil(self.registration.showNotification(String(data.title || "Navi"), options));
});

async function openChat(url) {
  const windows = await self.clients.matchAll({ type: "window", includeUncontrolled: true });
  const exact = windows.find((client) => client.url === url);
  if (exact) return exact.focus();
  // A Navi tab is open on another chat: bring it to the front and switch it (the chat routes by #id).
  const chat = windows.find((client) => new URL(client.url).pathname === "/" && "navigate" in client);
  if (chat) {
    const focused = await chat.focus();
    try {
      return await focused.navigate(url);
    } catch (err) {
      /* not controlled by this worker yet: open a new window instead */
    }
  }
  return self.clients.openWindow(url);
}

self.addEventListener("notificationclick", (event) => {
  event.notification.close();
  event.waitUntil(openChat(sameOriginUrl(event.notification.data && event.notification.data.url)));
});
