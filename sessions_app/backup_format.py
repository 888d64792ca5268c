"""The `navijson` serialization format of backups: Django's JSON, but datetimes keep their
microseconds (Django's encoder cuts them to milliseconds, which would reorder rows written in
the same millisecond and change every timestamp a restore brings back)."""

from __future__ import annotations

import datetime

from django.core.serializers.json import Deserializer, DjangoJSONEncoder
from django.core.serializers.json import Serializer as JsonSerializer

__all__ = ["Serializer", "Deserializer"]


class _ExactEncoder(DjangoJSONEncoder):
    def default(self, o):
        if isinstance(o, (datetime.datetime, datetime.time)):
            return o.isoformat()
        return super().default(o)


class Serializer(JsonSerializer):
    def _init_options(self):
        super()._init_options()
        self.json_kwargs["cls"] = _ExactEncoder
