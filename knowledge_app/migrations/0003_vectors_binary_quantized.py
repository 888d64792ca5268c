"""SQLite vector tables get a `coarse` bit column scanned instead of the float vectors (sqlite-vec
binary quantization, re-scored with the floats): the float-only tables are rebuilt, vectors kept."""

from django.db import migrations


def quantize(apps, schema_editor):
    conn = schema_editor.connection
    if conn.vendor != "sqlite":
        return
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT vec_version()")
    except Exception:  # noqa: BLE001 - sqlite-vec not loadable now: the first use upgrades them
        return
    from knowledge_app.vectors import upgrade

    upgrade(conn)


class Migration(migrations.Migration):
    dependencies = [("knowledge_app", "0002_offer_knowledge_tool")]

    operations = [migrations.RunPython(quantize, migrations.RunPython.noop)]
