from django.apps import AppConfig


class DemoConfig(AppConfig):
    """The demo: seeds a trained model with its reference, sends drifting traffic, runs it all.

    On top of every other app (it uses their services); nothing imports it.
    """

    name = "demo"
    verbose_name = "Demo"
