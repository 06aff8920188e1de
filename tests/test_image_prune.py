"""``chaos image prune``: removes the node and launcher images no run here would use, keeps the current ones.

Real docker (tagging costs no layers): the test tags the node image under two made-up tags, prunes with every other
tag on the machine kept, and checks only the made-up ones went, so it never removes a developer's own images."""

from __future__ import annotations

import os
import uuid

import pytest

from chaos.commands.image import current_tags
from chaos.image import IMAGE_REPO, ImageBuildError, _client, image_tag, image_with, prune_images


def _docker_with_node_image():  # type: ignore[no-untyped-def]
    try:
        client = _client(timeout=10)
        client.images.get(image_tag())
    except Exception as exc:  # no engine, or no node image on this machine
        if os.environ.get("CI") == "true":
            raise AssertionError(f"CI has docker and the node image (.ci/run builds it): {exc}") from exc
        pytest.skip(f"needs docker and the node image ({type(exc).__name__})")
    return client


def test_current_tags_are_the_node_image_and_each_launchers_image_on_it() -> None:
    tags = current_tags()
    assert image_tag() in tags
    assert all(t == image_tag() or t.startswith(f"{IMAGE_REPO}-extra:") for t in tags)
    assert image_with(("ray[train]==0.0.1",)) not in tags  # a pin no installed launcher asks for


def test_prune_removes_only_images_not_kept() -> None:
    client = _docker_with_node_image()
    node = client.images.get(image_tag())
    suffix = uuid.uuid4().hex[:12]
    made_up = {f"{IMAGE_REPO}:stale{suffix}", f"{IMAGE_REPO}-extra:stale{suffix}"}
    for tag in made_up:
        repo, _, version = tag.partition(":")
        node.tag(repo, version)
    try:
        keep = {t for repo in (IMAGE_REPO, f"{IMAGE_REPO}-extra") for image in client.images.list(name=repo)
                for t in image.tags} - made_up
        dry = prune_images(keep, dry_run=True)
        assert {p.tag for p in dry} == made_up and not any(p.removed for p in dry)
        assert all(p.why.startswith("would be removed") for p in dry)
        pruned = prune_images(keep)
        assert {p.tag for p in pruned if p.removed} == made_up
        left = {t for image in client.images.list() for t in image.tags}
        assert not made_up & left and image_tag() in left
    finally:
        for tag in made_up:
            try:
                client.images.remove(tag)
            except Exception:  # removed by the test itself
                pass


def test_prune_without_a_docker_engine_says_how_to_start_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    with pytest.raises(ImageBuildError, match="docker engine unreachable"):
        prune_images(set())
