"""``chaos image build|tag|prune``: the node image of the docker runtime, and the launchers' images on it."""

from __future__ import annotations

import argparse

from chaos.commands import error, out
from chaos.image import ImageBuildError, build_image, image_tag, image_with, prune_images
from chaos.registry import launcher_plugins
from chaos.run_result import EXIT_FAIL, EXIT_PASS


def main(args: argparse.Namespace) -> int:
    """``tag``: the node image's tag for these inputs; ``build``: build it (exit 1 with the builder's reason)."""
    if args.action == "tag":
        print(image_tag())
        return EXIT_PASS
    if args.action == "prune":
        return _prune(dry_run=args.dry_run)
    try:
        result = build_image(method=args.method, force=args.force, log=lambda line: out.print(line, highlight=False))
    except ImageBuildError as exc:
        error(str(exc))
        return EXIT_FAIL
    size = f", {result.size_bytes / 1e9:.2f} GB" if result.size_bytes else ""
    out.print(f"image {result.tag} ({result.method}, {result.seconds:.1f}s{size})", highlight=False)
    return EXIT_PASS


def current_tags() -> set[str]:
    """The images a run here would use now: the node image, and each installed launcher's image on it."""
    base = image_tag()
    return {base} | {image_with(packages, base) for launcher in launcher_plugins().values()
                     if (packages := launcher.image_packages())}


def _prune(dry_run: bool) -> int:
    try:
        pruned = prune_images(current_tags(), dry_run=dry_run)
    except ImageBuildError as exc:
        error(str(exc))
        return EXIT_FAIL
    for image in pruned:
        out.print(f"{image.tag} ({image.size_bytes / 1e9:.2f} GB): "
                  f"{'removed, ' if image.removed else ''}{image.why}", highlight=False)
    freed = sum(image.size_bytes for image in pruned if image.removed)
    out.print(f"{sum(image.removed for image in pruned)} image(s) removed ({freed / 1e9:.2f} GB; layers shared "
              "with a kept image stay)" if not dry_run else f"{len(pruned)} image(s) would be removed",
              highlight=False)
    return EXIT_PASS
