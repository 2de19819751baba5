"""Reading a manifest: one YAML (or JSON) document, walked field by field with Kubernetes' paths.

Contract (pure: PyYAML and the standard library): ``read_manifest(data)`` parses one UTF-8 YAML document
with the safe loader (tags that build objects are refused); ``ManifestUnreadable`` when the bytes are not
that (the API answers 400). ``FieldReader`` collects, while a translator (``api.shared.pytorchjob``) walks a
manifest, the fields it refuses (``Problem``: a path as Kubernetes writes it and what to change) and those
it ignores (warnings); ``ManifestRefused`` carries every problem found, not only the first. Values are
shown in messages shortened, and a mapping or list never by its contents (YAML aliases can make one
huge).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import yaml

DNS_LABEL = re.compile(
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
)  # the API's names (api.server.schemas: a test checks)


class ManifestUnreadable(ValueError):
    """The body is not one UTF-8 YAML (or JSON) document."""


@dataclass(frozen=True)
class Problem:
    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


class ManifestRefused(ValueError):
    """Fields Tide cannot honour, every one of them."""

    def __init__(self, problems: list[Problem]) -> None:
        super().__init__("; ".join(map(str, problems)))
        self.problems = problems


def read_manifest(data: bytes) -> Any:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ManifestUnreadable(f"the body is not UTF-8 text (byte {error.start})") from None
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        documents = [doc for doc in yaml.load_all(text, Loader=loader) if doc is not None]
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        raise ManifestUnreadable(f"the body is not valid YAML: {error.problem}{where}") from None
    except (yaml.YAMLError, RecursionError) as error:
        raise ManifestUnreadable(f"the body is not valid YAML: {type(error).__name__}") from None
    if len(documents) != 1:
        raise ManifestUnreadable(f"send one PyTorchJob manifest per request; this body has {len(documents)}")
    return documents[0]


def show(value: Any) -> str:
    if isinstance(value, dict | list):  # never repr a structure: YAML aliases can make it huge
        return f"a {'mapping' if isinstance(value, dict) else 'list'}"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


class FieldReader:
    """Notes problems and warnings with their paths while a translator walks a manifest."""

    def __init__(self) -> None:
        self.problems: list[Problem] = []
        self.warnings: list[str] = []

    def refuse(self, path: str, message: str) -> None:
        self.problems.append(Problem(path, message))

    def warn(self, path: str, message: str) -> None:
        self.warnings.append(f"{path}: {message}")

    def mapping(self, value: Any, path: str, *, required: bool = True) -> dict[str, Any]:
        if value is None and not required:
            return {}
        if not isinstance(value, dict):
            self.refuse(path, "required" if value is None else f"must be a mapping, not {show(value)}")
            return {}
        return value

    def string(self, value: Any, path: str) -> str | None:
        if not isinstance(value, str) or not value:
            self.refuse(
                path, "required" if value is None else f"must be a non-empty string, not {show(value)}"
            )
            return None
        return value

    def label(self, value: Any, path: str) -> str | None:
        """A name the API takes (a DNS-1123 label), refused here so that it is listed with every other
        problem rather than found alone once they are fixed."""
        name = self.string(value, path)
        if name is not None and (len(name) > 63 or not DNS_LABEL.match(name)):
            self.refuse(
                path,
                f"{show(name)} is not a valid name: use at most 63 lowercase letters, digits and '-', "
                "starting and ending with a letter or digit (a DNS-1123 label), e.g. 'train-resnet'",
            )
            return None
        return name

    def strings(self, value: Any, path: str) -> list[str]:
        if value is None:
            return []
        if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
            self.refuse(path, f"must be a list of strings (quote numbers), not {show(value)}")
            return []
        return value

    def count(self, value: Any, path: str, *, least: int) -> int | None:
        number = int(value) if isinstance(value, str) and value.isdigit() else value
        if isinstance(number, bool) or not isinstance(number, int) or number < least:
            self.refuse(path, f"must be a whole number of at least {least}, not {show(value)}")
            return None
        return number

    def leftovers(self, found: dict[str, Any], path: str, known: set[str], quiet: set[str] = set()) -> None:  # noqa: B006 - never mutated
        for key in found:
            if key not in known and key not in quiet:
                self.warn(f"{path}.{key}" if path else str(key), "ignored: Tide does not use this field")
