from typing import Any

from django.db import migrations, models


def create_the_mark(apps: Any, schema_editor: Any) -> None:
    """The table and its one row, which every fresh INSERT of a name reads (nothing
    was purged yet). The table may be there already: the recovery that check
    tslock.E007 advises for a dropped tslock_lock replays every migration of the app,
    and this table was not dropped with it."""
    model = apps.get_model("tslock_django", "FencingMark")
    connection = schema_editor.connection
    if model._meta.db_table not in connection.introspection.table_names():
        schema_editor.create_model(model)
    model.objects.using(connection.alias).get_or_create(id=1, defaults={"mark": 0})


def drop_the_mark(apps: Any, schema_editor: Any) -> None:
    model = apps.get_model("tslock_django", "FencingMark")
    if model._meta.db_table in schema_editor.connection.introspection.table_names():
        schema_editor.delete_model(model)


class Migration(migrations.Migration):
    dependencies = [("tslock_django", "0003_listing_indexes")]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name="FencingMark",
                    fields=[
                        ("id", models.PositiveSmallIntegerField(primary_key=True, serialize=False)),
                        ("mark", models.BigIntegerField(default=0)),
                    ],
                    options={
                        "verbose_name": "fencing high-water mark",
                        "db_table": "tslock_fence",
                        "default_permissions": (),
                    },
                ),
            ]
        ),
        migrations.RunPython(create_the_mark, drop_the_mark, atomic=False, elidable=False),
    ]
