"""Image references follow the grammar every registry client parses; nothing else is an image."""

from __future__ import annotations

import pytest

from iris.core.errors import InvalidArgument
from iris.core.images import check_image

DIGEST = "sha256:" + "0123456789abcdef" * 4


@pytest.mark.parametrize(
    "image",
    [
        "busybox",
        "local/busybox:1",
        "ghcr.io/org/team/app:v2.1-rc_3",
        "localhost:5000/a/b_c__d-e:1.0",
        "[::1]:5000/x",
        f"app@{DIGEST}",
        f"registry.example.org/app:v2@{DIGEST}",
    ],
)
def test_check_image_reference_is_accepted_unchanged(image):
    assert check_image(image) == image


@pytest.mark.parametrize(
    "image, fragment",
    [
        ("--volume=/:/host", "starts with '-'"),
        ("-v/:/host", "starts with '-'"),
        ("two words", "is not an image name"),
        (" busybox", "is not an image name"),
        ("Busybox", "is not an image name"),  # a repository name is lower-case
        ("app:", "is not an image name"),
        ("app@sha256:1234", "is not an image name"),  # a digest has at least 32 hex digits
        ("a//b", "is not an image name"),
        ("a/" + "b" * 255, "longer than 255"),
    ],
)
def test_check_image_other_text_is_refused_saying_why(image, fragment):
    with pytest.raises(InvalidArgument, match="image .* is not an image name") as refused:
        check_image(image)
    assert fragment in str(refused.value)
