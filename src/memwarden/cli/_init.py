"""``memwarden init``: a commented ``memwarden.toml`` for a project, from what is there.

fs rooted at the project (with the usual ignores), a ``code_test`` sensor when the project
looks like a pytest project (its interpreter and test paths), ``git`` when the directory
is a git work tree, ``http`` for local services, ``review`` for people, and an API
endpoint of its own (a free loopback port recorded in ``.memwarden/api.json``) so that
two projects' daemons run side by side.
"""

from __future__ import annotations

import configparser
import json
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["CONFIG_NAME", "PytestProject", "detect_pytest", "is_git_work_tree", "render_config"]

CONFIG_NAME = "memwarden.toml"
FS_IGNORE = (
    ".git",
    ".hg",
    ".svn",
    ".venv",
    "venv",
    ".tox",
    ".nox",
    "node_modules",
    "__pycache__",
    ".memwarden",
    ".mypy_cache",
    ".pytest_cache",
    ".ruff_cache",
    ".hypothesis",
    "dist",
    "build",
    "*.egg-info",
)
_VENVS = (".venv/bin/python", "venv/bin/python", "env/bin/python")


@dataclass(frozen=True)
class PytestProject:
    """What ``init`` found out about a pytest project."""

    found_in: str  # the file (or layout) that said so
    test_paths: list[str] = field(default_factory=list)
    source_dirs: list[str] = field(default_factory=list)


def _ini_testpaths(text: str, section: str) -> list[str] | None:
    parser = configparser.ConfigParser(interpolation=None)
    try:
        parser.read_string(text)
    except configparser.Error:
        return None
    if not parser.has_section(section):
        return None
    return parser.get(section, "testpaths", fallback="").split()


def _declared(root: Path) -> tuple[str, list[str]] | None:
    """The pytest configuration the project declares: (file, testpaths)."""
    pyproject = root / "pyproject.toml"
    if pyproject.is_file():
        try:
            data = tomllib.loads(pyproject.read_text(encoding="utf-8"))
        except (tomllib.TOMLDecodeError, UnicodeDecodeError):
            data = {}
        options = data.get("tool", {}).get("pytest", {}).get("ini_options")
        if isinstance(options, dict):
            paths = options.get("testpaths", [])
            paths = [paths] if isinstance(paths, str) else paths
            return "pyproject.toml", [str(p) for p in paths if isinstance(p, str)]
    for name, section in (
        ("pytest.ini", "pytest"),
        ("tox.ini", "pytest"),
        ("setup.cfg", "tool:pytest"),
    ):
        path = root / name
        if path.is_file():
            paths = _ini_testpaths(path.read_text(encoding="utf-8", errors="replace"), section)
            if paths is not None:
                return name, paths
    return None


def detect_pytest(root: Path) -> PytestProject | None:
    """A pytest project: declared in its config files, or a ``tests`` dir of test files."""
    declared = _declared(root)
    if declared is None:
        tests = root / "tests"
        has_tests = tests.is_dir() and (
            any(tests.rglob("test_*.py")) or any(tests.rglob("*_test.py"))
        )
        if not has_tests and not (root / "conftest.py").is_file():
            return None
        declared = ("tests/" if has_tests else "conftest.py", ["tests"] if has_tests else [])
    found_in, paths = declared
    test_paths = [p for p in paths if (root / p).is_dir() and ".." not in Path(p).parts]
    if not test_paths and (root / "tests").is_dir():
        test_paths = ["tests"]
    source_dirs = [d for d in ("src",) if (root / d).is_dir()] + test_paths
    return PytestProject(found_in, test_paths, source_dirs or ["."])


def is_git_work_tree(root: Path) -> bool:
    """Whether ``root`` is the top of a git work tree: ``.git`` is a directory, or a file
    pointing at one (``gitdir: ...``, a linked work tree or a submodule)."""
    dot = root / ".git"
    try:
        if dot.is_dir():
            return True
        with dot.open("rb") as f:
            return f.read(7) == b"gitdir:"
    except OSError:
        return False


def _project_name(root: Path) -> str:
    """The name in pyproject.toml, else the directory's (a clone may be named anything)."""
    try:
        name = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))["project"][
            "name"
        ]
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError, KeyError, TypeError):
        name = None
    return name if isinstance(name, str) else (root.resolve().name or str(root.resolve()))


def _python(root: Path, python: str | None) -> str:
    if python:
        return python
    for candidate in _VENVS:
        if (root / candidate).is_file():
            return candidate
    return "python3"


def _toml_list(items: list[str] | tuple[str, ...]) -> str:
    return "[" + ", ".join(json.dumps(i) for i in items) + "]"


def render_config(root: Path, *, python: str | None = None) -> str:
    """The commented ``memwarden.toml`` for the project in ``root``."""
    name = _project_name(root)
    project = detect_pytest(root)
    lines = [
        f"# memwarden.toml for {name}, written by `memwarden init`.",
        "#",
        "# `memwarden run` in this directory uses this file; `memwarden config check` checks it",
        "# and prints every problem. Relative paths are relative to this file's directory.",
        "# The CLI and `memwarden mcp` find this project's daemon from here or any",
        "# subdirectory (./.memwarden), like git finds a repository.",
        "",
        "# State: the database, the API token and api.json. Keep it out of version control.",
        'home = ".memwarden"',
        "",
        "[api]",
        'host = "127.0.0.1"    # loopback only',
        "port = 0              # a free port, written to .memwarden/api.json: a daemon per project",
        '# unix_socket = ".memwarden/api.sock"   # or a Unix socket (mode 0600) instead of a port',
        "",
        "# Privacy: e-mail addresses, phone numbers, card numbers, IBANs, national ids and",
        "# secrets are replaced by keyed placeholders ([email:5f1c2a9b0d3e4f51]) before anything",
        '# is stored; IP addresses are kept. Per kind "redact", "reject" (refused, 422) or',
        '# "allow"; per source (agent, sensor, review, import) in [privacy.sources.<source>].',
        "# SIGHUP reloads it; GET/PUT /v1/privacy show and change it (a PUT is kept in the",
        "# state dir and overrides this table until DELETE /v1/privacy; docs/PRIVACY.md).",
        "# [privacy.rules]",
        '# ip = "redact"         # where agents see users\' traffic',
        '# secret = "reject"     # refuse a fact that carries a token instead of storing it',
        "",
        "# Files: facts bound to a path, optionally a JSON pointer into JSON/TOML/YAML, a regex,",
        '# a sha256. Bind with {"sensor": "fs", "path": "pyproject.toml", "key": "/project/name",',
        '# "equals": "..."}.',
        "[sensors.fs]",
        'roots = ["."]',
        f"ignore = {_toml_list(FS_IGNORE)}",
        "# index = false  # binding suggestions index the values in JSON/YAML/TOML/INI/.env",
        "#                # files (on by default; docs/SUGGESTIONS.md)",
        "",
    ]
    if project is not None:
        lines += [
            f"# Tests: a pytest project (found: {project.found_in}). Bind with",
            '# {"sensor": "tests", "test": "tests/test_x.py::test_y"}, "prefix" or "keyword".',
            "[sensors.tests]",
            'kind = "code_test"',
            'project_root = "."',
            f"command = {_toml_list([_python(root, python), '-m', 'pytest'])}  # its Python",
            f"source_dirs = {_toml_list(project.source_dirs)}  # a change re-runs bound tests",
            "",
        ]
    else:
        lines += [
            "# No pytest project found here. For one, add:",
            "# [sensors.tests]",
            '# kind = "code_test"',
            '# project_root = "."',
            '# command = [".venv/bin/python", "-m", "pytest"]',
            '# source_dirs = ["src", "tests"]',
            "",
        ]
    if is_git_work_tree(root):
        lines += [
            "# Git: this repository's branch, clean or not, a commit or tag at HEAD, how far",
            '# ahead of a ref. Bind with {"sensor": "git", "repo": ".", "branch": "main"}.',
            "# HEAD, the index and refs are watched: a switch or a commit is seen at once.",
            "[sensors.git]",
            'roots = ["."]',
            "",
        ]
    lines += [
        "# HTTP: does a local service still answer what a fact says? Only these hosts.",
        '# Bind with {"sensor": "http", "url": "http://127.0.0.1:8000/health", "status": [200]}.',
        "[sensors.http]",
        'allowed_hosts = ["127.0.0.1:*", "localhost:*", "[::1]:*"]',
        'interval = "5m"',
        "",
        "# People: facts no sensor can check go to the review queue (`memwarden review`).",
        "[sensors.review]",
        "",
        "# Binding suggestions (docs/SUGGESTIONS.md; from the fs value index, on by default).",
        "# [suggest]",
        '# bind = "auto"            # a fact added without `bind` (API, MCP): auto|suggest|none',
        "# auto_min_confidence = 0.85",
        '# propose_interval = "1h"  # the pass proposing bindings for unbound facts (review page)',
        "# propose = false          # switch that pass off",
        "",
        "# Search by meaning (docs/SEARCH.md): hybrid keyword + vector search, offline.",
        "# Needs pip install 'memwarden[semantic]'; after changing it: memwarden reembed.",
        "# [search]",
        '# embedder = "wordllama"   # none (keyword only, the default) | wordllama | stub | http',
        "# [search.embedders.http]   # a local Ollama-style server (loopback unless allowed_hosts)",
        '# url = "http://127.0.0.1:11434/api/embed"',
        '# model = "nomic-embed-text"',
        "# dim = 768",
        "",
        "# Retention: nothing is removed by age unless configured here (docs/PRIVACY.md).",
        "# `memwarden forget ID` erases a fact for good at any time.",
        "# [[retention.rules]]",
        '# tag = "scratch"            # also tier, category, source',
        '# max_age = "30d"            # archived 30 days after it was added',
        '# archived_max_age = "7d"    # then erased for good (a tombstone stays)',
        '# events_max_age = "90d"     # its older sensor observations deleted',
        "",
        "# Agents: .memwarden/token is the agent `default` (everything). Other agents get",
        "# their own token, operations and namespaces (docs/PRIVACY.md, Agents and namespaces).",
        "# [agents.reviewer-bot]",
        '# token_env = "REVIEWER_BOT_TOKEN"   # or token_file (0600); never the token here',
        '# operations = ["read", "review"]    # read, write, forget, review, report, admin',
        '# namespaces = ["default"]           # the projects it sees and writes',
        "",
    ]
    return "\n".join(lines)
