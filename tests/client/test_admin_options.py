"""The Admin client refuses options it does not have by name (no bare TypeError)."""

from __future__ import annotations

import re

import pytest

from raystream.client.admin import Admin
from raystream.errors import InvalidConfigError


@pytest.mark.parametrize(
    ("key", "message"),
    [
        ("bootstrap_servers", "key 'bootstrap_servers': a raystream client reaches"),
        ("request_timeout_ms", "key 'request_timeout_ms': Admin takes no options"),
    ],
)
def test_an_unknown_admin_option_is_refused_by_name(key: str, message: str) -> None:
    with pytest.raises(InvalidConfigError, match=re.escape(message)) as raised:
        Admin(cluster=object(), **{key: 1})
    assert not raised.value.retriable
