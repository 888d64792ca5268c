from django.urls import path

from . import views

urlpatterns = [
    path("memory", views.memory, name="memory"),
    path("memory/facts/<str:fact_id>", views.memory_fact, name="memory-fact"),
    path("memory/facts/<str:fact_id>/confirm", views.confirm_fact, name="memory-fact-confirm"),
]
