from django.apps import AppConfig

from navi_project.startup import server_started
from sessions_app.signals import session_created


class AgentConfig(AppConfig):
    name = "agent"
    verbose_name = "Agent"

    def ready(self) -> None:
        # Imported here, not at the top: these modules import models (Django's app-loading rule).
        from agent.memory import tasks as memory_tasks
        from agent.runs import startup
        from agent.toolcalling.guards import ledger
        from agent.turn import compression, titles
        from agent.web import model_choice
        from agent.web.health import register_check
        from knowledge_app import status as knowledge_status
        from knowledge_app import vectors
        from sessions_app.model_choice import register_model_lister

        ledger.switched_off()  # a NAVI_GUARDS_OFF naming no repair group stops the server here, not in a turn
        compression.register_workers()  # context compression before and after a turn
        titles.register_workers()  # a generated title after the first answer
        register_model_lister(model_choice.names_for_profile)  # PATCH /sessions/<id> {"model"}
        session_created.connect(memory_tasks.on_session_created, dispatch_uid="agent.memory.extraction")
        server_started.connect(startup.on_server_started, dispatch_uid="agent.runs.startup")
        register_check("embeddings", knowledge_status.problem)  # search by meaning, or why it is words only
        register_check("rerank", knowledge_status.reranker_problem)  # the reranker when one is set: "ok" or why not used
        register_check("vectors", vectors.available)  # the vector index (sqlite-vec / pgvector), or why not
