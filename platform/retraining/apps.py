from django.apps import AppConfig


class RetrainingConfig(AppConfig):
    name = "retraining"
    verbose_name = "Retraining"
