import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from cluster import NsCluster, available  # noqa: E402


@pytest.fixture(scope="session")
def cluster():
    """Two "nodes" (network + UTS + mount namespaces on a private bridge). Skipped without root; CI must have it."""
    why = available()
    if why is not None:
        if os.environ.get("CI"):
            pytest.fail(f"the multi-node tests must run in CI: {why}")
        pytest.skip(why)
    with NsCluster(2) as c:
        yield c
