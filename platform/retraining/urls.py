from django.urls import path

from retraining import api

urlpatterns = [
    path("models/<str:name>/retrain", api.RetrainView.as_view(), name="api-retrain"),
    path("models/<str:name>/retrain-jobs", api.ModelJobsView.as_view(), name="api-retrain-jobs"),
    path("models/<str:name>/champion", api.ChampionView.as_view(), name="api-champion"),
    path(
        "models/<str:name>/champion/artifact",
        api.ChampionArtifactView.as_view(),
        name="api-champion-artifact",
    ),
    path("retrain-jobs/<int:job_id>", api.JobView.as_view(), name="api-retrain-job"),
    path("retrain-jobs/<int:job_id>/cancel", api.JobCancelView.as_view(), name="api-retrain-cancel"),
    *[
        path(
            f"retrain-jobs/<int:job_id>/{action}",
            api.JobActionView.as_view(action=action),
            name=f"api-retrain-{action}",
        )
        for action in ("approve", "reject", "rollback")
    ],
]
