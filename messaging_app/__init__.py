"""Messaging channels: a transport turns incoming messages into turns of a Navi session and a
run's frames into outgoing messages. Telegram is the first transport (messaging_app.telegram)."""
