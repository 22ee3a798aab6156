"""A call's arguments checked against its tool's JSON schema, before anyone is asked to approve
it: a call the tool would refuse anyway goes back to the model as an error, never to a person.

A schema that is itself broken (an MCP server may publish one) checks nothing: the server is
left to refuse the call, as it would without this check.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from gateway.logs import get_logger

if TYPE_CHECKING:
    from jsonschema.exceptions import ValidationError

log = get_logger(__name__)

# How many of the errors one call breaks the schema with are named to the model.
MAX_NAMED: Final = 3


class InvalidArguments(Exception):
    """The arguments break the tool's schema; the message says where and how."""


def check_args(tool: str, schema: dict[str, Any], args: dict[str, Any]) -> None:
    """Raise `InvalidArguments` when `args` break `schema`."""
    # Imported on the first call: it costs ~0.1 s, which the client commands do not pay.
    import jsonschema
    import referencing.exceptions

    try:
        cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
        cls.check_schema(schema)
        errors = sorted(cls(schema).iter_errors(args), key=jsonschema.exceptions.relevance)
    except (
        jsonschema.exceptions.SchemaError,
        jsonschema.exceptions.UnknownType,
        referencing.exceptions.Unresolvable,
    ) as exc:
        first_line = str(exc).split("\n")[0]
        log.warning("tool schema unusable; arguments not checked", tool=tool, error=first_line)
        return
    if not errors:
        return
    named = [_describe(error) for error in errors[:MAX_NAMED]]
    more = len(errors) - len(named)
    tail = f" (and {more} more)" if more else ""
    raise InvalidArguments(f"invalid arguments for {tool}: " + "; ".join(named) + tail)


def _describe(error: ValidationError) -> str:
    where = "/".join(str(part) for part in error.absolute_path)
    return f"at {where}: {error.message}" if where else error.message
