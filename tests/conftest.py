import pytest


@pytest.fixture
def anyio_backend() -> str:
    """Async tests run on asyncio (anyio's pytest plugin; see ``@pytest.mark.anyio``)."""
    return "asyncio"
