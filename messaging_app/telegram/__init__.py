"""The Telegram transport: python-telegram-bot's `Bot` against TELEGRAM_API_URL, long polling
(or a webhook) with a lease in the database, and the handlers for updates."""
