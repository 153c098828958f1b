"""JSON views over the services. Authentication is the project's (these expect
``request.user``, as Django's session or token middleware sets it)."""

from __future__ import annotations

import json

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.http import require_GET, require_POST

from talk import services
from talk.models import Post
from talk.tokens import hub_token


def _refused(request: HttpRequest) -> HttpResponse | None:
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return JsonResponse({"error": "not signed in"}, status=401)
    return None


@require_POST
def post_message(request: HttpRequest, room_id: int) -> HttpResponse:
    if refused := _refused(request):
        return refused
    body = json.loads(request.body)["body"]
    try:
        post = services.post_message(room_id, request.user, body)  # type: ignore[arg-type]
    except services.NotAMember:
        return JsonResponse({"error": "not a member of this room"}, status=403)
    return JsonResponse({"id": post.pk, "roomId": room_id, "number": post.number}, status=201)


@require_POST
def edit_message(request: HttpRequest, post_id: int) -> HttpResponse:
    if refused := _refused(request):
        return refused
    try:
        post = services.edit_message(post_id, request.user, json.loads(request.body)["body"])  # type: ignore[arg-type]
    except Post.DoesNotExist:
        return JsonResponse({"error": "no such post of yours"}, status=404)
    return JsonResponse({"id": post.pk, "number": post.number})


@require_GET
def realtime_token(request: HttpRequest) -> HttpResponse:
    """What the client passes as the SignalR ``accessTokenFactory``'s token."""
    if refused := _refused(request):
        return refused
    return JsonResponse({"token": hub_token(request.user)})  # type: ignore[arg-type]
