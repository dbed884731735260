from django.apps import AppConfig


class BadJobsConfig(AppConfig):
    name = "tests.badjobs"
    label = "badjobs"
