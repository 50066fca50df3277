from django.urls import path

from monitoring import api

urlpatterns = [
    path("models/<str:name>/predictions", api.PredictionsView.as_view(), name="api-predictions"),
    path("models/<str:name>/labels", api.LabelsView.as_view(), name="api-labels"),
]
