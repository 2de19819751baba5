"""The client's copies of the API's answer shapes, checked against ``api.server.schemas`` (``make lint``).

Contract: ``problems()`` lists, one sentence each, every way the client's copies drifted from the answer
models of ``api.server.schemas`` (each ``*Public`` and ``*Slot`` model, and ``Health``):
``api.client.client_types`` must have a class of the same name with the same fields in the same order,
each of the same type as the client reads it (a ``Literal`` or string enum is a ``str``, a model its
twin's name), required where the model's is and with the same default where it is not; and the quick
path's ``JOB_FIELDS``/``REPLICA_FIELDS`` (``api.client.cli.quick``) must be the required fields of
``JobPublic``/``ReplicaPublic``. ``python -m api.server.mirrors`` prints them and exits 1 when there is
any. The client keeps copies (no pydantic there) because importing the models costs every ``tide`` command
about 0.1 s.
"""

from __future__ import annotations

import dataclasses
import enum
import sys
import types
import typing
from datetime import datetime
from typing import Any

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from api.client import client_types
from api.client.cli import quick
from api.server import schemas

CLIENT = "api/client/client_types.py"
QUICK = "api/client/cli/quick.py"


def answer_models() -> dict[str, type[BaseModel]]:
    """The API's answer models by name: what the client reads."""
    return {
        name: model
        for name, model in vars(schemas).items()
        if isinstance(model, type)
        and issubclass(model, BaseModel)
        and (name.endswith(("Public", "Slot")) or name == "Health")
    }


def plain(annotation: Any) -> str:
    """A model field's type as the client's dataclasses write it."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if annotation is type(None) or annotation is None:
        return "None"
    if origin is typing.Annotated:
        return plain(args[0])
    if origin in (typing.Union, types.UnionType):
        return " | ".join(plain(arg) for arg in args)
    if origin is typing.Literal:
        return " | ".join(sorted({type(arg).__name__ for arg in args}))
    if origin is not None:
        return f"{getattr(origin, '__name__', str(origin))}[{', '.join(plain(arg) for arg in args)}]"
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return " | ".join(sorted({type(member.value).__name__ for member in annotation}))
    if isinstance(annotation, type) and (issubclass(annotation, BaseModel) or annotation is datetime):
        return annotation.__name__
    return getattr(annotation, "__name__", str(annotation))


def _twin_problems(name: str, model: type[BaseModel]) -> list[str]:
    twin = getattr(client_types, name, None)
    if twin is None or not dataclasses.is_dataclass(twin):
        return [f"{CLIENT} has no class {name}: add one with {name}'s fields (api/server/schemas.py)"]
    theirs = {f.name: f for f in dataclasses.fields(twin) if f.name != "raw"}
    found: list[str] = []
    if list(theirs) != list(model.model_fields):
        found.append(
            f"{CLIENT}: {name}'s fields are {list(theirs)}; api/server/schemas.py's are "
            f"{list(model.model_fields)} (same names, same order)"
        )
    for field_name, info in model.model_fields.items():
        twin_field = theirs.get(field_name)
        if twin_field is None:
            continue
        where = f"{CLIENT}: {name}.{field_name}"
        expected = plain(info.annotation)
        if twin_field.type != expected:
            found.append(f"{where} is `{twin_field.type}`; the API's model says `{expected}`")
        has_default = (twin_field.default, twin_field.default_factory) != (dataclasses.MISSING,) * 2
        if has_default == info.is_required():
            found.append(f"{where} must {'not ' if info.is_required() else ''}have a default, as in the API")
        elif has_default and info.default is not PydanticUndefined and twin_field.default != info.default:
            found.append(f"{where} defaults to {twin_field.default!r}; the API's to {info.default!r}")
    return found


def _required(model: type[BaseModel]) -> tuple[str, ...]:
    return tuple(name for name, info in model.model_fields.items() if info.is_required())


def problems() -> list[str]:
    """Every drift of the client's copies from the API's models (see the module contract)."""
    found = [problem for name, model in answer_models().items() for problem in _twin_problems(name, model)]
    for constant, model in (("JOB_FIELDS", schemas.JobPublic), ("REPLICA_FIELDS", schemas.ReplicaPublic)):
        if getattr(quick, constant) != _required(model):
            found.append(
                f"{QUICK}: {constant} must be the required fields of {model.__name__} "
                f"(api/server/schemas.py): {_required(model)}"
            )
    return found


def main() -> int:
    found = problems()
    for problem in found:
        print(problem, file=sys.stderr)
    if found:
        print("the client's copies of the API's answers drifted: change them as said above", file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
