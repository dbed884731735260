from django.db import migrations, models


class Migration(migrations.Migration):
    """Indexes the listing queries read in order: current locks are ``lock_until >
    now``, and each time order pages by ``(time, name)``."""

    dependencies = [("tslock_django", "0002_code_point_names")]

    operations = [
        migrations.AddIndex(
            model_name="lock",
            index=models.Index(fields=["lock_until", "name"], name="tslock_lock_until_name"),
        ),
        migrations.AddIndex(
            model_name="lock",
            index=models.Index(fields=["locked_at", "name"], name="tslock_locked_at_name"),
        ),
    ]
