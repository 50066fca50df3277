from django.urls import path

from monitoring import api

urlpatterns = [
    path("models/<str:name>/predictions", api.PredictionsView.as_view(), name="api-predictions"),
    path("models/<str:name>/labels", api.LabelsView.as_view(), name="api-labels"),
    path("models/<str:name>/checks", api.ChecksView.as_view(), name="api-checks"),
    path("models/<str:name>/checks/<int:check_id>", api.CheckView.as_view(), name="api-check"),
    path("models/<str:name>/alerts", api.AlertsView.as_view(), name="api-alerts"),
    path("models/<str:name>/policy", api.PolicyView.as_view(), name="api-policy"),
]
