"""A small checker for breaking changes between two OpenAPI 3 documents.

Breaking, for a client written against ``old``: a path or operation removed; a parameter
removed, made required, added as required, or its type changed; a request body made
required, a request field newly required, removed or narrowed; a success status code
dropped; a response field removed or its type changed (recursively, through ``$ref``).
Additions (paths, operations, optional parameters, response fields) are not breaking.
"""

from __future__ import annotations

from typing import Any

__all__ = ["breaking_changes"]

_METHODS = ("get", "put", "post", "delete", "patch", "head", "options")
_MAX_DEPTH = 12


class _Doc:
    def __init__(self, doc: dict[str, Any]) -> None:
        self.doc = doc

    def resolve(self, schema: Any) -> dict[str, Any]:
        seen = 0
        while isinstance(schema, dict) and "$ref" in schema and seen < 50:
            ref = schema["$ref"]
            node: Any = self.doc
            for part in ref.removeprefix("#/").split("/"):
                node = node.get(part, {}) if isinstance(node, dict) else {}
            schema = node
            seen += 1
        if isinstance(schema, dict) and len(schema.get("allOf", [])) == 1:
            return self.resolve(schema["allOf"][0])
        return schema if isinstance(schema, dict) else {}

    def types(self, schema: Any) -> frozenset[str]:
        s = self.resolve(schema)
        members = s.get("anyOf") or s.get("oneOf")
        if members:
            return frozenset().union(*(self.types(m) for m in members))
        kind = s.get("type")
        if isinstance(kind, list):
            return frozenset(kind)
        if kind:
            return frozenset({kind})
        return frozenset({"object"}) if "properties" in s else frozenset({"any"})

    def object_part(self, schema: Any) -> dict[str, Any] | None:
        """The object (with properties) a schema is, or one member of its anyOf is."""
        s = self.resolve(schema)
        if "properties" in s:
            return s
        for member in s.get("anyOf") or s.get("oneOf") or []:
            found = self.object_part(member)
            if found is not None:
                return found
        return None

    def array_items(self, schema: Any) -> Any:
        s = self.resolve(schema)
        if "items" in s:
            return s["items"]
        for member in s.get("anyOf") or []:
            m = self.resolve(member)
            if "items" in m:
                return m["items"]
        return None


def _params(doc: _Doc, path_item: dict[str, Any], op: dict[str, Any]) -> dict[tuple[str, str], Any]:
    out = {}
    for raw in [*path_item.get("parameters", []), *op.get("parameters", [])]:
        p = doc.resolve(raw)
        out[
            (
                p.get("in", ""),
                p.get("name", "").lower() if p.get("in") == "header" else p.get("name", ""),
            )
        ] = p
    return out


def _json_schema(doc: _Doc, holder: dict[str, Any] | None) -> Any:
    if not holder:
        return None
    content = doc.resolve(holder).get("content", {})
    media = content.get("application/json")
    return media.get("schema") if media else None


def _compare_response(  # noqa: PLR0917 - a recursive walk over two documents in step
    old: _Doc, new: _Doc, o: Any, n: Any, where: str, out: list[str], depth: int = 0
) -> None:
    if depth > _MAX_DEPTH or o is None:
        return
    if n is None:
        out.append(f"{where}: response schema removed")
        return
    ot, nt = old.types(o), new.types(n)
    if "any" not in ot and ot != nt and not (nt <= ot):
        out.append(f"{where}: type changed from {sorted(ot)} to {sorted(nt)}")
        return
    oo, no = old.object_part(o), new.object_part(n)
    if oo is not None:
        if no is None:
            out.append(f"{where}: no longer an object")
            return
        for name, prop in oo.get("properties", {}).items():
            if name not in no.get("properties", {}):
                out.append(f"{where}.{name}: response field removed")
            else:
                _compare_response(
                    old, new, prop, no["properties"][name], f"{where}.{name}", out, depth + 1
                )
    oi, ni = old.array_items(o), new.array_items(n)
    if oi is not None:
        _compare_response(old, new, oi, ni, f"{where}[]", out, depth + 1)


def _compare_request(  # noqa: PLR0917 - a recursive walk over two documents in step
    old: _Doc, new: _Doc, o: Any, n: Any, where: str, out: list[str], depth: int = 0
) -> None:
    if depth > _MAX_DEPTH or n is None or o is None:
        return
    ot, nt = old.types(o), new.types(n)
    if "any" not in nt and not ot <= nt:
        out.append(f"{where}: accepts {sorted(nt)}, not {sorted(ot)} any more")
        return
    oo, no = old.object_part(o), new.object_part(n)
    if oo is None or no is None:
        return
    newly = set(no.get("required", [])) - set(oo.get("required", []))
    out.extend(f"{where}.{name}: request field became required" for name in sorted(newly))
    for name, prop in oo.get("properties", {}).items():
        if name not in no.get("properties", {}):
            out.append(f"{where}.{name}: request field removed")
        else:
            _compare_request(
                old, new, prop, no["properties"][name], f"{where}.{name}", out, depth + 1
            )


def breaking_changes(old_doc: dict[str, Any], new_doc: dict[str, Any]) -> list[str]:
    """What in ``new_doc`` breaks a client of ``old_doc`` (empty: compatible)."""
    old, new = _Doc(old_doc), _Doc(new_doc)
    out: list[str] = []
    for path, old_item in old_doc.get("paths", {}).items():
        new_item = new_doc.get("paths", {}).get(path)
        if new_item is None:
            out.append(f"{path}: path removed")
            continue
        for method in _METHODS:
            if method not in old_item:
                continue
            where = f"{method.upper()} {path}"
            if method not in new_item:
                out.append(f"{where}: operation removed")
                continue
            o_op, n_op = old_item[method], new_item[method]
            o_params, n_params = _params(old, old_item, o_op), _params(new, new_item, n_op)
            for key, p in o_params.items():
                q = n_params.get(key)
                if q is None:
                    out.append(f"{where}: parameter {key[1]} ({key[0]}) removed")
                    continue
                if q.get("required") and not p.get("required"):
                    out.append(f"{where}: parameter {key[1]} became required")
                _compare_request(
                    old, new, p.get("schema"), q.get("schema"), f"{where} {key[1]}", out
                )
            for key, q in n_params.items():
                if key not in o_params and q.get("required"):
                    out.append(f"{where}: new required parameter {key[1]} ({key[0]})")
            o_body, n_body = o_op.get("requestBody"), n_op.get("requestBody")
            if (
                n_body
                and new.resolve(n_body).get("required")
                and not (o_body and old.resolve(o_body).get("required"))
            ):
                out.append(f"{where}: request body became required")
            _compare_request(
                old, new, _json_schema(old, o_body), _json_schema(new, n_body), f"{where} body", out
            )
            for code, o_resp in o_op.get("responses", {}).items():
                if not str(code).startswith("2"):
                    continue
                n_resp = n_op.get("responses", {}).get(code)
                if n_resp is None:
                    out.append(f"{where}: success status {code} removed")
                    continue
                _compare_response(
                    old,
                    new,
                    _json_schema(old, o_resp),
                    _json_schema(new, n_resp),
                    f"{where} {code}",
                    out,
                )
    return out
