#!/usr/bin/env python3
"""Checks spec/openapi.yaml against the prose contract beside it.

Validates the document as OpenAPI 3.1, then compares it with README.md (every `METHOD /path`
route, in both directions, and the command-request fields) and errors.md (codes and
statuses), resolves every local `$ref` (also those inside `x-` extensions, which the validator
skips) and validates the examples attached to schemas. Prints one line per mismatch and exits 1
if there is any.

Needs PyYAML and openapi-spec-validator. Usage: check_openapi.py [SPEC_DIR]
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml
from openapi_schema_validator import OAS31Validator
from openapi_spec_validator import OpenAPIV31SpecValidator
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

HTTP_METHODS = ("get", "put", "post", "delete", "patch", "head", "options", "trace")
ROUTE_RE = re.compile(r"\b(GET|PUT|POST|DELETE|PATCH|HEAD|OPTIONS|TRACE) (/[^\s`\[?]*)")
FIELD_ROW_RE = re.compile(r"^\|\s*`([a-z_]+)`\s*\|", re.MULTILINE)
ERROR_ROW_RE = re.compile(r"^\|\s*`([a-z_]+)`\s*\|\s*(\d{3})\s*\|", re.MULTILINE)
DOC_URI = "urn:sandstream:openapi"

Route = tuple[str, str]


def normalize(path: str) -> str:
    """Drops path-parameter names so `/x/{id}` and `/x/{sandbox_id}` compare equal."""
    return re.sub(r"\{[^}]*\}", "{}", path.rstrip("/") or "/")


def readme_routes(text: str) -> dict[Route, str]:
    """The routes named in README.md: (METHOD, normalized path) -> the path as written."""
    return {(m, normalize(p)): p for m, p in ROUTE_RE.findall(text)}


def openapi_routes(doc: dict[str, Any]) -> dict[Route, str]:
    """The operations of the OpenAPI document, keyed like readme_routes."""
    routes: dict[Route, str] = {}
    for path, item in (doc.get("paths") or {}).items():
        for method in HTTP_METHODS:
            if method in item:
                routes[(method.upper(), normalize(path))] = path
    return routes


def route_mismatches(readme: dict[Route, str], spec: dict[Route, str]) -> list[str]:
    """Routes in one document but not the other."""
    problems = [f"route in README.md, missing from openapi.yaml: {m} {readme[(m, p)]}"
                for m, p in sorted(readme.keys() - spec.keys())]
    problems += [f"route in openapi.yaml, not in README.md: {m} {spec[(m, p)]}"
                 for m, p in sorted(spec.keys() - readme.keys())]
    return problems


def error_mismatches(errors_md: str, doc: dict[str, Any]) -> list[str]:
    """Differences between errors.md's table and the ErrorCode schema (enum and x-status)."""
    table = {code: int(status) for code, status in ERROR_ROW_RE.findall(errors_md)}
    schema = doc.get("components", {}).get("schemas", {}).get("ErrorCode", {})
    enum = list(schema.get("enum", []))
    statuses = dict(schema.get("x-status", {}))
    problems = []
    if not table:
        problems.append("errors.md: no error-code table found")
    if enum != list(table):
        problems.append(f"ErrorCode enum {enum} differs from errors.md codes {list(table)}")
    for code, status in table.items():
        if statuses.get(code) != status:
            problems.append(
                f"ErrorCode x-status[{code}] is {statuses.get(code)}, errors.md says {status}")
    problems += [f"ErrorCode x-status has {code}, errors.md does not"
                 for code in statuses.keys() - table.keys()]
    return problems


def command_field_mismatches(readme: str, doc: dict[str, Any]) -> list[str]:
    """Differences between README.md's command-request table and CommandRequest's properties."""
    section = readme.split("The command request", 1)[-1].split("\n\n", 2)
    table = section[1] if len(section) > 1 else ""
    fields = set(FIELD_ROW_RE.findall(table))
    schema = doc.get("components", {}).get("schemas", {}).get("CommandRequest", {})
    props = set(schema.get("properties", {}))
    if not fields:
        return ["README.md: no command-request table found"]
    return ([f"command field in README.md, missing from CommandRequest: {f}"
             for f in sorted(fields - props)]
            + [f"CommandRequest field not in README.md: {f}" for f in sorted(props - fields)])


def walk(node: Any, where: str = "#") -> Iterator[tuple[str, Any]]:
    """Every (JSON pointer, value) in the document, depth first."""
    yield where, node
    if isinstance(node, dict):
        for key, value in node.items():
            yield from walk(value, f"{where}/{str(key).replace('~', '~0').replace('/', '~1')}")
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from walk(value, f"{where}/{index}")


def resolve(doc: Any, pointer: str) -> bool:
    """Whether a local JSON pointer (`#/a/b`) names something in the document."""
    node = doc
    for part in pointer.removeprefix("#/").split("/"):
        part = part.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return False
    return True


def ref_mismatches(doc: dict[str, Any]) -> list[str]:
    """Local `$ref`s that point nowhere, anywhere in the document."""
    return [f"{where}: $ref {node['$ref']} does not resolve"
            for where, node in walk(doc)
            if isinstance(node, dict) and isinstance(node.get("$ref"), str)
            and node["$ref"].startswith("#/") and not resolve(doc, node["$ref"])]


def example_mismatches(doc: dict[str, Any]) -> list[str]:
    """Schema `examples` under components/schemas that their own schema rejects."""
    registry = Registry().with_resource(
        DOC_URI, Resource.from_contents(doc, default_specification=DRAFT202012))
    problems = []
    for name, schema in doc.get("components", {}).get("schemas", {}).items():
        validator = OAS31Validator({"$ref": f"{DOC_URI}#/components/schemas/{name}"},
                                   registry=registry)
        for index, example in enumerate(schema.get("examples", [])):
            for error in validator.iter_errors(example):
                problems.append(f"schema {name} examples[{index}]: {error.message}")
    return problems


def check(spec_dir: Path) -> list[str]:
    """All mismatches between openapi.yaml and the .md contract in spec_dir."""
    doc = yaml.safe_load((spec_dir / "openapi.yaml").read_text(encoding="utf-8"))
    if not isinstance(doc, dict):
        return ["openapi.yaml: not a mapping"]
    # The validator and the example check raise on a dangling $ref; they run only without one.
    problems = ref_mismatches(doc)
    if not problems:
        problems += [f"openapi: {e.message} at {'/'.join(map(str, e.absolute_path)) or '(root)'}"
                     for e in OpenAPIV31SpecValidator(doc).iter_errors()]
    readme = (spec_dir / "README.md").read_text(encoding="utf-8")
    problems += route_mismatches(readme_routes(readme), openapi_routes(doc))
    problems += command_field_mismatches(readme, doc)
    problems += error_mismatches((spec_dir / "errors.md").read_text(encoding="utf-8"), doc)
    if not problems:
        problems += example_mismatches(doc)
    return problems


def main(argv: list[str]) -> int:
    """Runs the checks and reports; 0 when openapi.yaml matches the contract."""
    spec_dir = Path(argv[1]) if len(argv) > 1 else Path(__file__).resolve().parent
    problems = check(spec_dir)
    for problem in problems:
        print(problem, file=sys.stderr)
    if problems:
        print(f"check_openapi: {len(problems)} mismatch(es)", file=sys.stderr)
        return 1
    print(f"check_openapi: {spec_dir / 'openapi.yaml'} matches README.md and errors.md")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
