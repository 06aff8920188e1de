"""``chaos image build|tag``: the node image of the docker runtime."""

from __future__ import annotations

import argparse

from chaos.commands import error, out
from chaos.image import ImageBuildError, build_image, image_tag
from chaos.run_result import EXIT_FAIL, EXIT_PASS


def main(args: argparse.Namespace) -> int:
    """``tag``: the node image's tag for these inputs; ``build``: build it (exit 1 with the builder's reason)."""
    if args.action == "tag":
        print(image_tag())
        return EXIT_PASS
    try:
        result = build_image(method=args.method, force=args.force, log=lambda line: out.print(line, highlight=False))
    except ImageBuildError as exc:
        error(str(exc))
        return EXIT_FAIL
    size = f", {result.size_bytes / 1e9:.2f} GB" if result.size_bytes else ""
    out.print(f"image {result.tag} ({result.method}, {result.seconds:.1f}s{size})", highlight=False)
    return EXIT_PASS
