from django.contrib.auth import views as auth_views
from django.templatetags.static import static
from django.urls import path
from django.views.generic import RedirectView

from dashboard import drift_views, job_views, views

app_name = "dashboard"
urlpatterns = [
    path("", views.home, name="home"),
    # Browsers ask for /favicon.ico on pages without an icon link (admin, API docs).
    path("favicon.ico", RedirectView.as_view(url=static("img/favicon.svg"), permanent=True)),
    path(
        "login/",
        auth_views.LoginView.as_view(template_name="dashboard/login.html", redirect_authenticated_user=True),
        name="login",
    ),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("models/<str:name>/", views.model_page, name="model"),
    path("models/<str:name>/drift/", drift_views.feature_drift_page, name="feature-drift"),
    path("models/<str:name>/checks/run", views.model_check_run, name="model-check-run"),
    path("models/<str:name>/retrain", views.model_retrain, name="model-retrain"),
    path("models/<str:name>/policy", views.model_policy_edit, name="model-policy-edit"),
    path("retraining/", job_views.retraining_page, name="retraining"),
    path("retraining/<int:job_id>/", job_views.retrain_job_page, name="retrain-job"),
    path("retrain-jobs/<int:job_id>/<str:action>", views.retrain_job_action, name="retrain-job-action"),
    path("checks/<int:check_id>/", views.check_detail, name="check"),
    path("checks/<int:check_id>/report", views.check_report, name="check-report"),
    path("checks/<int:check_id>/report/request", views.check_report_request, name="check-report-request"),
    path("alerts/", views.alerts_page, name="alerts"),
    path("gpu/", views.gpu_page, name="gpu"),
    path("alerts/<int:alert_id>/acknowledge", views.alert_acknowledge, name="alert-acknowledge"),
    path("alerts/<int:alert_id>/resolve", views.alert_resolve, name="alert-resolve"),
]
