"""Decides whether a string is a container image reference: `[host[:port]/]path[:tag][@digest]`.

The grammar is the one Docker and every OCI registry client parse (distribution's `reference`
package), written out as the same regular expressions; a job's image is checked against it at
submit, so a value the Docker client would read as something else (`--volume=/:/host`, which
starts with `-`, or a name with spaces) is refused there with a clear error instead of reaching a
worker. Backends still pass the image after `--`, where no client reads it as an option.
"""

from __future__ import annotations

import re

from iris.core.errors import InvalidArgument

NAME_MAX = 255  # characters in the name (host and path), as in distribution's reference package

_ALPHANUMERIC = r"[a-z0-9]+"
_SEPARATOR = r"(?:[._]|__|[-]+)"
_PATH_COMPONENT = rf"{_ALPHANUMERIC}(?:{_SEPARATOR}{_ALPHANUMERIC})*"
_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_HOST = rf"(?:{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*|\[[a-fA-F0-9:]+\])"
_NAME = rf"(?:{_HOST}(?::[0-9]+)?/)?{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*"
_TAG = r"[\w][\w.-]{0,127}"
_DIGEST = r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}"
REFERENCE = re.compile(rf"(?P<name>{_NAME})(?::(?P<tag>{_TAG}))?(?:@(?P<digest>{_DIGEST}))?", re.ASCII)


def check_image(image: str) -> str:
    """`image` when it is an image reference; InvalidArgument saying what is wrong otherwise."""
    example = "use a reference such as busybox:1.36, ghcr.io/org/app:v2 or app@sha256:<digest>"
    if image.startswith("-"):
        raise InvalidArgument(
            f"image {image[:80]!r} is not an image name: it starts with '-', as an option does; {example}"
        )
    match = REFERENCE.fullmatch(image)
    if match is None:
        raise InvalidArgument(f"image {image[:80]!r} is not an image name; {example}")
    if len(match["name"]) > NAME_MAX:
        raise InvalidArgument(f"image {image[:80]!r}… is not an image name: it is longer than {NAME_MAX} characters")
    return image
