from django.urls import path

from dashboard import views

app_name = "dashboard"
urlpatterns = [
    path("", views.home, name="home"),
    path("models/<str:name>/", views.model_page, name="model"),
]
