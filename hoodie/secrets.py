"""Secrets in text: the one masking rule of every message, log line and shown setting.

Connection strings carry credentials in two places, and both are shown as ``***``: a URL's password
(``redis://user:PASSWORD@host``, a mistyped ``redis:/user:PASSWORD@host`` too) and a credential
parameter (``sc://host:15002/;token=T``, ``?password=P``, ``&sig=S``). Pure: the commands, the
daemon and the Spark engine all mask through ``mask_secrets`` before text leaves the process.
"""

from __future__ import annotations

import re

__all__ = ["mask_secrets"]

#: Up to the LAST ``@`` of the word: a password may hold ``@`` or ``/`` itself (URL clients such as
#: redis-py split the user part at its last ``@``); masking too much is the safe way to be wrong.
_URL_PASSWORD = re.compile(r"(\b[a-z][a-z0-9+.-]*:/*[^\s/:@]*:)\S*@", re.IGNORECASE)
#: A value already masked is matched as itself, so masking twice changes nothing (a message masked
#: where it was made is masked again on its way out).
_SECRET_PARAM = re.compile(
    r"([;?&][a-z0-9_.-]*(?:password|passwd|secret|token|credential|key|sig)=)(?:\*\*\*|[^;&\s'\"]+)",
    re.IGNORECASE,
)


def mask_secrets(text: str) -> str:
    """``text`` with the password and the credential parameters of every URL in it shown as ``***``."""
    return _SECRET_PARAM.sub(r"\1***", _URL_PASSWORD.sub(r"\1***@", text))
