"""Field docstrings as JSON-schema descriptions, for LangGraph Studio's forms.

LangGraph reports a graph's schemas through pydantic, which reads a TypedDict's field
docstrings only when asked (``use_attribute_docstrings``) and never inherited ones:
``documented`` asks, and copies inherited fields' docstrings from the bases' source.
"""

from __future__ import annotations

import ast
import inspect
import itertools
import textwrap
from typing import Any

from pydantic import ConfigDict, with_config


def field_docstrings(cls: type) -> dict[str, str]:
    """The docstrings under the fields of ``cls``'s own body; empty without its source (as
    pydantic's own extraction), so a schema loses descriptions rather than failing."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    except (OSError, TypeError, SyntaxError):
        return {}
    body = tree.body[0].body if isinstance(tree.body[0], ast.ClassDef) else []
    docs = {}
    for field, doc in itertools.pairwise(body):
        if (
            isinstance(field, ast.AnnAssign)
            and isinstance(field.target, ast.Name)
            and isinstance(doc, ast.Expr)
            and isinstance(doc.value, ast.Constant)
            and isinstance(doc.value.value, str)
        ):
            docs[field.target.id] = inspect.cleandoc(doc.value.value)
    return docs


def _inherited_descriptions(schema: dict[str, Any], cls: type) -> None:
    properties = schema.get("properties", {})
    for base in getattr(cls, "__orig_bases__", ()):
        if isinstance(base, type) and base is not dict:
            for name, doc in field_docstrings(base).items():
                if name in properties:
                    properties[name].setdefault("description", doc)
            _inherited_descriptions(schema, base)


documented = with_config(
    ConfigDict(use_attribute_docstrings=True, json_schema_extra=_inherited_descriptions)
)
"""Class decorator: field docstrings, inherited ones too, become JSON-schema descriptions."""
