"""``hoodie.secrets.mask_secrets``: URL passwords and credential parameters never shown."""

from __future__ import annotations

import pytest

from hoodied.hoodie.secrets import mask_secrets


@pytest.mark.parametrize(("text", "shown"), [
    ("redis://user:pw@redis:6379/0", "redis://user:***@redis:6379/0"),
    ("redis://:pw@redis:6379/0", "redis://:***@redis:6379/0"),
    # a password holding '@' or '/' (clients split the user part at its last '@')
    ("redis://user:p@ss@redis:6379/0", "redis://user:***@redis:6379/0"),
    ("redis://user:pa/ss@redis/0", "redis://user:***@redis/0"),
    ("redis:/user:pw@redis/0", "redis:/user:***@redis/0"),  # a mistyped scheme too
    ("sc://spark:15002/;user_id=h;token=t0k", "sc://spark:15002/;user_id=h;token=***"),
    ("https://a.blob/c?sv=1&sig=abc&se=2", "https://a.blob/c?sv=1&sig=***&se=2"),
    ("lock redis://:pw@h:1/0 beside redis://h2:2/0", "lock redis://:***@h:1/0 beside redis://h2:2/0"),
    ("redis://redis:6379/0 and local[2]", "redis://redis:6379/0 and local[2]"),  # nothing to hide
])
def test_passwords_and_credential_parameters_are_masked(text: str, shown: str) -> None:
    assert mask_secrets(text) == shown
    assert mask_secrets(shown) == shown  # twice is once: a message is masked where made and on its way out
    assert mask_secrets(f"Spark Connect {shown}: session start") == f"Spark Connect {shown}: session start"
