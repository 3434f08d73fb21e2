"""The public surface is a flat, sorted ``__all__`` that matches what the package exports."""

import unbroken


def test_all_is_sorted_and_unique() -> None:
    assert unbroken.__all__ == sorted(set(unbroken.__all__))


def test_all_matches_public_members() -> None:
    public = {name for name in dir(unbroken) if not name.startswith("_")}
    # Submodules are attributes too; they are reached by import, not exported.
    modules = {name for name in public if type(getattr(unbroken, name)).__name__ == "module"}
    assert set(unbroken.__all__) - {"__version__"} == public - modules


def test_version_is_a_string() -> None:
    assert unbroken.__version__ == "0.1.0"


def test_resuming_transport_names_load_on_first_use() -> None:
    from unbroken.client import resuming

    assert unbroken.http_client is resuming.http_client
    assert unbroken.async_http_client is resuming.async_http_client
    assert unbroken.ResumingTransport is resuming.ResumingTransport
