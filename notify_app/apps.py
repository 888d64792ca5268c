from django.apps import AppConfig
from django.db.models.signals import post_delete, post_save


class NotifyAppConfig(AppConfig):
    name = "notify_app"
    verbose_name = "Notifications"

    def ready(self) -> None:
        # Imported here, not at the top: these modules import models (Django's app-loading rule).
        from notify_app import apprise_target, delivery, webpush
        from notify_app.models import NotifyTarget
        from notify_app.senders import register_sender

        register_sender(webpush.WebPushSender())
        register_sender(apprise_target.AppriseSender())  # Apprise and its connect guard load at first use

        def forget(sender, instance, **kwargs) -> None:
            delivery.forget_has_targets(instance.owner_id)

        post_save.connect(forget, sender=NotifyTarget, dispatch_uid="notify_app.has_targets.save", weak=False)
        post_delete.connect(forget, sender=NotifyTarget, dispatch_uid="notify_app.has_targets.delete", weak=False)
