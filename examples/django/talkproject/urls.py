from django.urls import path
from talk import views

urlpatterns = [
    path("rooms/<int:room_id>/posts", views.post_message, name="post-message"),
    path("posts/<int:post_id>", views.edit_message, name="edit-message"),
    path("realtime/token", views.realtime_token, name="realtime-token"),
]
