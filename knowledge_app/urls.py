from django.urls import path

from . import document_views, views

urlpatterns = [
    path("knowledge", views.documents, name="knowledge"),
    path("knowledge/search", views.knowledge_search, name="knowledge-search"),
    path("knowledge/", views.knowledge_page, name="knowledge-page"),
    path("knowledge/passages/<str:passage_id>", views.passage, name="knowledge-passage"),
    path("knowledge/<str:document_id>", views.document, name="knowledge-document"),
    path("knowledge/<str:document_id>/passages", views.passages, name="knowledge-passages"),
    path("knowledge/<str:document_id>/view", document_views.document_page, name="knowledge-document-page"),
    path("knowledge/<str:document_id>/file", document_views.document_file, name="knowledge-document-file"),
]
