from django.apps import AppConfig


class ControlPlaneConfig(AppConfig):
    name = "control_plane"
