"""Reactions: an emoji per (post, user), hard deleted when taken back."""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models

import talk.models


class Migration(migrations.Migration):
    dependencies = [
        ("talk", "0003_realtime_membership"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name="Reaction",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("emoji", models.CharField(max_length=32)),
                ("created_at", models.DateTimeField(db_default=talk.models.TransactionNow())),
                (
                    "post",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="reactions",
                        to="talk.post",
                    ),
                ),
                (
                    "user",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="reactions",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
            ],
            options={
                "constraints": [
                    models.UniqueConstraint(
                        fields=("post", "user", "emoji"), name="talk_reaction_one_per_emoji"
                    )
                ],
            },
        ),
    ]
