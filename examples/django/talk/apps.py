from django.apps import AppConfig


class TalkConfig(AppConfig):
    name = "talk"
    default_auto_field = "django.db.models.BigAutoField"
