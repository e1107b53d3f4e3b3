"""Global options anywhere: the top-level group's options also after the subcommand.

``kflashpy burn m.kmodel --addr 0x300000 -p /dev/ttyUSB0`` and
``kflashpy -p /dev/ttyUSB0 burn m.kmodel --addr 0x300000`` mean the same. The group's own
options stay the one definition: :func:`accept_anywhere` copies each of them onto every
command and sub-group (hidden from their --help, named in its epilog), with no default and
no environment variable, so a copy changes the :class:`Session` only when it was typed; the
environment defaults stay the group's. A command that defines one of these flags itself
would give it a second meaning: :func:`conflicts` names such commands (a test keeps the
list empty) and the copy is not attached there.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import click
from click.core import ParameterSource

from ..errors import UsageError
from .session import Session


def apply_global(s: Session, name: str, value: Any, *, added: bool = False) -> None:
    """Set one global option on the session (``added``: a second -v or -p adds to the first)."""
    if name == "port":  # repeatable: a -p after the command adds a board
        s.port = (*s.port_list, *value) if added else value
    elif name == "no_progress":
        s.show_progress = not value
    elif name == "as_json":
        s.json = s.json or bool(value)
    elif name == "verbose":
        s.verbose = (s.verbose if added else 0) + (value or 0)
    else:
        setattr(s, name, value)
    if s.verbose and s.quiet:
        raise UsageError("-v/--verbose and -q/--quiet cannot be used together", "pick one")


def _late(ctx: click.Context, param: click.Parameter, value: Any) -> None:
    if ctx.get_parameter_source(param.name) is ParameterSource.COMMANDLINE:
        # typed before the command too: -v -v and -p -p add up; else it overrides the env
        typed = ctx.find_root().get_parameter_source(param.name) is ParameterSource.COMMANDLINE
        apply_global(ctx.ensure_object(Session), param.name, value, added=typed)


def _copy(option: click.Option) -> click.Option:
    late = copy.copy(option)
    late.envvar, late.default, late.show_default, late.show_envvar = None, None, False, False
    late.callback, late.expose_value, late.hidden, late.is_eager = _late, False, True, False
    return late


def _walk(group: click.Group) -> Iterator[tuple[str, click.Command]]:
    for name, command in group.commands.items():
        yield name, command
        if isinstance(command, click.Group):
            for sub, inner in _walk(command):
                yield f"{name} {sub}", inner


def _globals(group: click.Group) -> list[click.Option]:
    return [p for p in group.params if isinstance(p, click.Option) and p.name != "version"]


def conflicts(group: click.Group) -> dict[str, list[str]]:
    """Commands that define a global flag themselves: {command path: [flags]}."""
    found: dict[str, list[str]] = {}
    for path, command in _walk(group):
        own = {
            o for p in command.params if p.callback is not _late for o in p.opts + p.secondary_opts
        }
        clash = sorted(o for g in _globals(group) for o in g.opts + g.secondary_opts if o in own)
        if clash:
            found[path] = clash
    return found


def accept_anywhere(group: click.Group) -> None:
    """Attach copies of the group's options to every command below it (once)."""
    clashes = conflicts(group)
    names = ", ".join(min(o.opts, key=len) for o in _globals(group))
    note = f"Global options ({names}) work here too."
    for path, command in _walk(group):
        if any(p.callback is _late for p in command.params):
            continue
        for option in _globals(group):
            if not set(option.opts) & set(clashes.get(path, [])):
                command.params.append(_copy(option))
        command.epilog = f"{command.epilog}\n\n{note}" if command.epilog else note
