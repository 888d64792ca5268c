from django.apps import AppConfig


class AgentConfig(AppConfig):
    name = "agent"
    verbose_name = "Agent"

    def ready(self) -> None:
        from agent import titles

        titles.register_workers()  # a generated title after the first answer
