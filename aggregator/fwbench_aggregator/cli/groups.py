"""Option groups: options that several commands take, declared once as a dataclass whose fields are typer options,
and handed to a command as one object. `@with_groups` lays a group's fields out as the command's own options, in
the place of the parameter that names the group, so that a new option of a group is one field, in one place."""

from __future__ import annotations

import dataclasses
import functools
import inspect
from collections.abc import Callable, Mapping
from typing import Any, TypeVar, get_type_hints

Command = TypeVar("Command", bound=Callable[..., Any])


def settings_group(name: str, options: Mapping[str, Any], defaults: Mapping[str, Any], base: type) -> type:
    """A group whose fields are run settings (plan.settings), each with its option (`options`) and default, in
    order; `base` holds the group's methods and its docstring."""
    fields = [(setting, options[setting], dataclasses.field(default=default)) for setting, default in defaults.items()]
    return dataclasses.make_dataclass(
        name, fields, bases=(base,), frozen=True, namespace={"__doc__": base.__doc__, "__module__": base.__module__}
    )


def _default(field: dataclasses.Field) -> Any:
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return inspect.Parameter.empty if field.default is dataclasses.MISSING else field.default


def _group_parameters(group: type) -> list[inspect.Parameter]:
    hints = get_type_hints(group, include_extras=True)  # the Annotated typer options, not their plain types
    return [
        inspect.Parameter(
            field.name, inspect.Parameter.KEYWORD_ONLY, annotation=hints[field.name], default=_default(field)
        )
        for field in dataclasses.fields(group)
    ]


def with_groups(command: Command) -> Command:
    """`def command(..., runners: RunnerOptions)`: each parameter annotated with a group (a dataclass) becomes that
    group's options on the command line, and the command gets the group's object."""
    signature = inspect.signature(command, eval_str=True)
    hints = get_type_hints(command, include_extras=True)
    groups = {name: hint for name, hint in hints.items() if dataclasses.is_dataclass(hint) and name != "return"}
    parameters = []
    for parameter in signature.parameters.values():
        if parameter.name in groups:
            parameters += _group_parameters(groups[parameter.name])
        else:
            parameters.append(parameter.replace(kind=inspect.Parameter.KEYWORD_ONLY, annotation=hints[parameter.name]))
    names = [parameter.name for parameter in parameters]
    clashes = sorted({name for name in names if names.count(name) > 1})
    if clashes:
        raise TypeError(f"{command.__name__}: options named twice by its groups and parameters: {', '.join(clashes)}")

    @functools.wraps(command)
    def with_group_objects(**values: Any) -> Any:
        for name, group in groups.items():
            values[name] = group(**{field.name: values.pop(field.name) for field in dataclasses.fields(group)})
        return command(**values)

    with_group_objects.__signature__ = signature.replace(parameters=parameters)
    with_group_objects.__annotations__ = {parameter.name: parameter.annotation for parameter in parameters}
    return with_group_objects  # type: ignore[return-value]
