"""What a code_test binding may select, and the one place its arguments are built.

A binding *selects* tests among those the configuration's project holds; it never
configures the run. The rules (checked when a block is added, and again right before
every run):

- no value starts with ``-`` (an option) or ``@`` (argparse's ``@file``: pytest reads
  arguments from such a file, even after ``--``); no control characters;
- a ``test`` or ``prefix`` names a path relative to ``project_root``: no ``..``, no ``.``,
  no empty part, no backslash; the path resolved (symlinks followed) stays inside
  ``project_root``; a file must be one that pytest's ``python_files`` patterns make a
  test file (``test_*.py``, ``*_test.py`` unless the project's ini says otherwise), a
  ``prefix`` may also name a directory;
- a ``keyword`` is a ``-k`` expression of names, ``and``/``or``/``not`` and brackets,
  passed as a single argument ``-k<expression>``.

The test command always gets the project's own ini file (``-c``), ``--rootdir`` and
``--confcutdir`` set to ``project_root``: an ini file or ``addopts`` in a sub-directory
the selection names cannot take over, and no ``conftest.py`` above the project loads.
"""

from __future__ import annotations

import configparser
import fnmatch
import re
import shlex
import tomllib
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from memwarden.errors import ValidationInputError

__all__ = [
    "DEFAULT_PYTHON_FILES",
    "FIXED_ARGS",
    "PytestLayout",
    "check_keyword",
    "check_path_syntax",
    "check_selection",
    "find_ini",
    "pytest_argv",
]

DEFAULT_PYTHON_FILES = ("test_*.py", "*_test.py")
#: pytest's own order for the config files it discovers (pytest 9; older ones skip the toml).
_INI_NAMES = (
    "pytest.toml",
    ".pytest.toml",
    "pytest.ini",
    ".pytest.ini",
    "pyproject.toml",
    "tox.ini",
    "setup.cfg",
)
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_PATH_PART = re.compile(r"^[\w.+=,~-]+$")
# Names (letters, digits, _ . : [ ] / + -), spaces and brackets: pytest's -k grammar, minus
# everything it does not need (no quotes, no '=', no '@', no '\').
_KEYWORD = re.compile(r"^[\w .:()\[\]/+-]+$")
#: Arguments the sensor itself adds (with the report path, ini, rootdir and confcutdir).
FIXED_ARGS = ("-o", "junit_family=xunit1", "-p", "no:cacheprovider")


def _refuse(field: str, message: str) -> ValidationInputError:
    return ValidationInputError([(field, message)])


def _common(value: str, field: str) -> None:
    if not value or value != value.strip():
        raise _refuse(field, f"{value!r} is empty or has surrounding spaces")
    if _CONTROL.search(value):
        raise _refuse(field, "contains a control character (NUL, newline, tab ...)")
    if value[0] == "-":
        raise _refuse(field, f"{value!r} starts with '-' (it would be read as an option)")
    if value[0] == "@":
        raise _refuse(field, f"{value!r} starts with '@' (pytest would read arguments from a file)")


def check_keyword(value: str, field: str = "keyword") -> str:
    """A ``-k`` expression: names, spaces, brackets; nothing an option parser could take."""
    _common(value, field)
    if not _KEYWORD.fullmatch(value):
        raise _refuse(
            field,
            f"{value!r} is not a keyword expression (names, and/or/not, brackets; "
            "letters, digits, spaces and _ . : [ ] ( ) / + - only)",
        )
    return value


def check_path_syntax(value: str, field: str) -> tuple[PurePosixPath, str]:
    """``path[::rest]`` relative to the project, written plainly; (path, rest)."""
    _common(value, field)
    path_text, sep, rest = value.partition("::")
    if sep and not rest:
        raise _refuse(field, f"{value!r} ends with '::' (name a test after it)")
    if "\\" in path_text or path_text.startswith("/"):
        raise _refuse(field, f"{value!r} must be a path relative to the project root (with /)")
    parts = path_text.rstrip("/").split("/")
    for part in parts:
        if part in ("", ".", ".."):
            raise _refuse(
                field, f"{value!r} must be relative to the project root (no '..', '.' or '//')"
            )
        if not _PATH_PART.fullmatch(part) or part[0] in "-@":
            raise _refuse(
                field,
                f"{value!r}: the path part {part!r} may hold only letters, digits "
                "and _ . + = , ~ -",
            )
    return PurePosixPath(*parts), rest


@dataclass(frozen=True, slots=True)
class PytestLayout:
    """What the selection rules need to know about the project: its ini and test files."""

    root: Path
    ini: Path | None
    python_files: tuple[str, ...] = DEFAULT_PYTHON_FILES

    @classmethod
    def load(cls, root: Path, ini: Path | None = None) -> PytestLayout:
        """The project's ini (``ini``, else pytest's first config file in ``root``)."""
        root = root.resolve()
        if ini is None:
            ini = find_ini(root)
        patterns = _python_files(ini) if ini is not None else None
        return cls(root, ini, patterns or DEFAULT_PYTHON_FILES)

    def is_test_file(self, path: PurePosixPath) -> bool:
        """pytest's ``python_files`` match: by name, or by path for a pattern with a '/'."""
        return any(
            fnmatch.fnmatchcase(str(path) if "/" in pat else path.name, pat)
            for pat in self.python_files
        )


def check_selection(
    layout: PytestLayout,
    value: str,
    field: str,
    *,
    file_only: bool = False,
    must_exist: bool = False,
) -> str:
    """A ``test`` or ``prefix`` against the project on disk (see the module docstring).

    When a block is added, a path that does not exist yet is accepted if its name makes
    it a test file; every run checks again, and then it must exist (``must_exist``).
    """
    path, rest = check_path_syntax(value, field)
    names_a_test_file = layout.is_test_file(path)
    if (rest or file_only) and not names_a_test_file:
        raise _refuse(
            field,
            f"{str(path)!r} is not a test file (pytest's python_files: "
            f"{' '.join(layout.python_files)})",
        )
    full = layout.root / path
    try:
        resolved = full.resolve(strict=False)
    except (OSError, RuntimeError) as err:  # a symlink loop
        raise _refuse(field, f"{str(path)!r} cannot be resolved: {err}") from None
    if not resolved.is_relative_to(layout.root):
        raise _refuse(field, f"{str(path)!r} leads outside the project root (a symlink)")
    _no_nested_config(layout.root, path, field)
    if resolved.is_dir():
        if rest or file_only:
            raise _refuse(field, f"{str(path)!r} is a directory, not a test file")
        return value
    if not resolved.exists() and (must_exist or not names_a_test_file):
        raise _refuse(
            field,
            f"{str(path)!r} does not exist (a selection names a test file or a directory)",
        )
    if resolved.exists():
        real = PurePosixPath(resolved.relative_to(layout.root).as_posix())
        if not (names_a_test_file and layout.is_test_file(real)):
            raise _refuse(
                field,
                f"{str(path)!r} is not a test file (pytest's python_files: "
                f"{' '.join(layout.python_files)}); a selection never names other files",
            )
        if not resolved.is_file():
            raise _refuse(field, f"{str(path)!r} is not a regular file")
    return value


def _no_nested_config(root: Path, path: PurePosixPath, field: str) -> None:
    """Refuse a path in (or naming) a sub-directory that holds its own pytest config.

    pytest would take such a file as *the* config for a run that names the path (its
    ``addopts`` included); the sensor passes the project's ini explicitly, and refuses
    the selection too, so that the mistake (or the attempt) is seen when it is made.
    """
    parts = path.parts
    for depth in range(1, len(parts) + 1):
        directory = root.joinpath(*parts[:depth])
        if not directory.is_dir():
            break
        found = find_ini(directory)
        if found is not None:
            rel = found.relative_to(root).as_posix()
            raise _refuse(
                field,
                f"{str(path)!r} is in a sub-directory with its own pytest config ({rel}); "
                "a selection cannot bring its own configuration (configure a code_test "
                "sensor with that directory as its project_root instead)",
            )


def pytest_argv(
    command: list[str],
    *,
    layout: PytestLayout,
    report: Path,
    empty_ini: Path,
    selection: list[str],
) -> list[str]:
    """The whole command line: the configured command, the fixed arguments, the selection.

    ``selection`` is ``["-k<expression>"]`` or ``["--", path, ...]``, already checked.
    """
    ini = layout.ini if layout.ini is not None else empty_ini
    return [
        *command,
        f"--junitxml={report}",
        "-c",
        str(ini),
        f"--rootdir={layout.root}",
        f"--confcutdir={layout.root}",
        *FIXED_ARGS,
        "--continue-on-collection-errors",
        *selection,
    ]


def find_ini(root: Path) -> Path | None:
    """The config file pytest would pick in ``root`` itself (not above it), if any."""
    for name in _INI_NAMES:
        path = root / name
        if path.is_file() and _holds_pytest_config(path):
            return path
    return None


def _holds_pytest_config(path: Path) -> bool:
    try:
        if path.name in ("pytest.ini", ".pytest.ini", "pytest.toml", ".pytest.toml"):
            return True
        if path.suffix == ".toml":
            tool = tomllib.loads(path.read_text(encoding="utf-8")).get("tool", {})
            return isinstance(tool, dict) and "pytest" in tool
        parser = configparser.ConfigParser(interpolation=None)
        parser.read(path, encoding="utf-8")
        return parser.has_section("tool:pytest" if path.name == "setup.cfg" else "pytest")
    except (OSError, ValueError, configparser.Error):
        return False


def _python_files(ini: Path) -> tuple[str, ...] | None:
    """``python_files`` from an ini file (None: not set there, or unreadable)."""
    value: object = None
    try:
        if ini.suffix == ".toml":
            doc = tomllib.loads(ini.read_text(encoding="utf-8"))
            tool = doc.get("tool", {}).get("pytest", {})
            table = doc.get("pytest", {}) if ini.name != "pyproject.toml" else {}
            value = (
                table.get("python_files")
                or tool.get("python_files")
                or tool.get("ini_options", {}).get("python_files")
            )
        else:
            parser = configparser.ConfigParser(interpolation=None)
            parser.read(ini, encoding="utf-8")
            section = "tool:pytest" if ini.name == "setup.cfg" else "pytest"
            value = parser.get(section, "python_files", fallback=None)
    except (OSError, ValueError, AttributeError, configparser.Error):
        return None
    if isinstance(value, str):
        return tuple(shlex.split(value)) or None
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return tuple(value) or None
    return None
