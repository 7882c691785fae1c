#!/usr/bin/env python3
"""Checks that the error codes agree everywhere they are written down.

The daemon's `ErrorCode` enum (src/base/error.h), its wire names (`ErrorCodeName`,
src/base/error.cc) and statuses (`StatusFor`, found under src/), spec/errors.md, the Python
SDK's `ERROR_TYPES` (sdk/python/src/sandstream/errors.py) and the TypeScript SDK's
`ERROR_TABLE` (sdk/typescript/src/errors.ts) must name the same codes, each with one status.
Prints one line per mismatch and exits 1 if there is any. Standard library only.

Usage: check_errors.py [REPO_DIR]
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

# The Boost.Beast `http::status` names StatusFor uses, with their numbers.
BEAST_STATUS = {
    "bad_request": 400,
    "unauthorized": 401,
    "forbidden": 403,
    "not_found": 404,
    "method_not_allowed": 405,
    "request_timeout": 408,
    "conflict": 409,
    "payload_too_large": 413,
    "unsupported_media_type": 415,
    "too_many_requests": 429,
    "request_header_fields_too_large": 431,
    "internal_server_error": 500,
    "not_implemented": 501,
    "bad_gateway": 502,
    "service_unavailable": 503,
    "gateway_timeout": 504,
}

Table = dict[str, int | None]  # code -> status (None: this source states no status)


def _block(text: str, start: str, where: str) -> str:
    """The brace-delimited body that follows the first match of `start`."""
    match = re.search(start, text)
    if match is None:
        raise ValueError(f"{where}: {start!r} not found")
    opened = text.index("{", match.end() - 1)
    depth = 0
    for index in range(opened, len(text)):
        depth += {"{": 1, "}": -1}.get(text[index], 0)
        if depth == 0:
            return text[opened + 1:index]
    raise ValueError(f"{where}: {start!r} is never closed")


def _cases(body: str) -> dict[str, str]:
    """`case ErrorCode::kX: return Y;` (on one line or two) as {kX: Y}."""
    return dict(re.findall(r"case ErrorCode::(k\w+):\s*return\s+([^;]+);", body))


def cpp_table(repo: Path) -> tuple[Table, list[str]]:
    problems: list[str] = []
    header = repo / "src/base/error.h"
    enum = re.findall(r"\b(k\w+)\s*[,}=]",
                      _block(header.read_text(), r"enum class ErrorCode\s*\{", str(header)) + "}")
    source = repo / "src/base/error.cc"
    names = {k: v.strip().strip('"')
             for k, v in _cases(_block(source.read_text(), r"ErrorCodeName\(ErrorCode \w+\)\s*\{",
                                       str(source))).items()}
    status_file = next((p for p in sorted((repo / "src").rglob("*.cc"))
                        if re.search(r"\bstatus StatusFor\(ErrorCode \w+\)\s*\{", p.read_text())), None)
    if status_file is None:
        return {}, ["C++: no definition of StatusFor(ErrorCode) under src/"]
    statuses = _cases(_block(status_file.read_text(), r"\bstatus StatusFor\(ErrorCode \w+\)\s*\{",
                             str(status_file)))
    table: Table = {}
    for enumerator in enum:
        name = names.get(enumerator)
        status = statuses.get(enumerator, "").strip().removeprefix("http::status::")
        if name is None:
            problems.append(f"C++: ErrorCodeName has no case for ErrorCode::{enumerator}")
            continue
        if status not in BEAST_STATUS:
            problems.append(f"C++: StatusFor gives ErrorCode::{enumerator} {status or 'no status'!r}"
                            f" ({status_file.relative_to(repo)})")
        table[name] = BEAST_STATUS.get(status)
    problems += [f"C++: ErrorCodeName has a case for {k}, which ErrorCode does not have"
                 for k in names if k not in enum]
    return table, problems


def spec_table(repo: Path) -> Table:
    text = (repo / "spec/errors.md").read_text()
    return {code: int(status)
            for code, status in re.findall(r"^\|\s*`([a-z_]+)`\s*\|\s*(\d{3})\s*\|", text, re.M)}


def python_table(repo: Path) -> Table:
    text = (repo / "sdk/python/src/sandstream/errors.py").read_text()
    codes = dict(re.findall(r"^class (\w+)\(SandboxError\):.*?^    code = \"(\w+)\"", text, re.M | re.S))
    listed = re.search(r"^ERROR_TYPES\b.*?for cls in \((.*?)\)", text, re.M | re.S)
    if listed is None:
        return {}
    table: Table = {}
    for cls in re.findall(r"\w+", listed.group(1)):
        table[codes.get(cls, f"<{cls}: no code>")] = None
    return table


def typescript_table(repo: Path) -> Table:
    text = (repo / "sdk/typescript/src/errors.ts").read_text()
    body = _block(text, r"export const ERROR_TABLE\b[^=]*=\s*\{", "errors.ts")
    return {code: int(status) for code, status in re.findall(r"(\w+):\s*\[\s*\w+,\s*(\d{3})\s*\]", body)}


def mismatches(repo: Path) -> list[str]:
    cpp, problems = cpp_table(repo)
    tables = {
        "C++ (ErrorCode, ErrorCodeName, StatusFor)": cpp,
        "spec/errors.md": spec_table(repo),
        "Python ERROR_TYPES": python_table(repo),
        "TypeScript ERROR_TABLE": typescript_table(repo),
    }
    for source, table in tables.items():
        if not table:
            problems.append(f"{source}: no error codes found")
    reference_name, reference = "spec/errors.md", tables["spec/errors.md"]
    for source, table in tables.items():
        if source == reference_name:
            continue
        problems += [f"{source} has `{code}`, {reference_name} does not"
                     for code in table if code not in reference]
        problems += [f"{reference_name} has `{code}`, {source} does not"
                     for code in reference if code not in table]
        problems += [f"`{code}`: {source} says {status}, {reference_name} says {reference[code]}"
                     for code, status in table.items()
                     if status is not None and code in reference and reference[code] != status]
    return problems


def main(argv: list[str]) -> int:
    repo = Path(argv[1]) if len(argv) > 1 else Path(__file__).resolve().parents[1]
    try:
        problems = mismatches(repo)
    except (OSError, ValueError) as exc:
        problems = [str(exc)]
    for problem in problems:
        print(f"check_errors: {problem}")
    if problems:
        return 1
    print(f"check_errors: {len(spec_table(repo))} error codes agree in C++, spec/errors.md and both SDKs")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
