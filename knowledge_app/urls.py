from django.urls import path

from . import views

urlpatterns = [
    path("knowledge", views.documents, name="knowledge"),
    path("knowledge/search", views.knowledge_search, name="knowledge-search"),
    path("knowledge/", views.knowledge_page, name="knowledge-page"),
    path("knowledge/passages/<str:passage_id>", views.passage, name="knowledge-passage"),
    path("knowledge/<str:document_id>", views.document, name="knowledge-document"),
    path("knowledge/<str:document_id>/passages", views.passages, name="knowledge-passages"),
]
