"""Notifications to a user's devices and services: Web Push (the installed PWA) and Apprise URLs."""
