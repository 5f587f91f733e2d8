"""The Python SDK: `IrisClient(url)` submits, watches and stops jobs on one controller."""

from iris.client.client import DEFAULT_URL, IrisClient, default_url
from iris.client.launch import build_launch_request, default_user

__all__ = ["DEFAULT_URL", "IrisClient", "build_launch_request", "default_url", "default_user"]
