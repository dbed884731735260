from typing import Any

from django.db import migrations, models


def create_the_mark(apps: Any, schema_editor: Any) -> None:
    """The one row every fresh INSERT of a name reads; nothing was purged yet."""
    mark = apps.get_model("tslock_django", "FencingMark")
    mark.objects.using(schema_editor.connection.alias).get_or_create(id=1, defaults={"mark": 0})


class Migration(migrations.Migration):
    dependencies = [("tslock_django", "0003_listing_indexes")]

    operations = [
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
        migrations.RunPython(create_the_mark, migrations.RunPython.noop, elidable=False),
    ]
