"""Response headers more than one route sends.

Contract: ``header_warning(text)`` is a ``Warning`` header's value in RFC 7234's form, as Kubernetes sends
its warnings (``299 tide "..."``): printable ASCII (anything else becomes ``?``), quotes and backslashes
escaped.
"""

from __future__ import annotations


def header_warning(text: str) -> str:
    """A ``Warning`` header value (see the module contract)."""
    printable = "".join(ch if " " <= ch <= "~" else "?" for ch in text)
    return '299 tide "' + printable.replace("\\", "\\\\").replace('"', '\\"') + '"'
