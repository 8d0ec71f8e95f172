"""The Dockerfiles under ``images/`` agree with ``pyproject.toml``, COPY only what the build context
lets in, and ``conductor_core.cluster.images`` gives the references to run them (hadolint and the
torch pin helper, which run as processes: tests/integration/test_images.py).

The CPU images install their Python layer from a hashed lock file
(``images/<kind>/requirements.lock``, made by ``scripts/lock.sh``): every pin in it is exact and
hashed, and it still satisfies what ``pyproject.toml`` asks for (a dependency changed without
``make lock`` fails here, naming it).

No image is built here (no registry can be reached, so no base image can be pulled; see
``images/README.md``): these checks are what can be verified without one.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version

from conductor_core.cluster import images
from tests.support.dockerfiles import DOCKERFILES, KINDS, PYPROJECT, ROOT, instructions

# -- reading Dockerfiles ---------------------------------------------------------------------------


def args_defaults(path: Path) -> dict[str, str]:
    """Default values of every ``ARG NAME=value`` (global and per stage)."""
    found: dict[str, str] = {}
    for keyword, args in instructions(path):
        if keyword == "ARG" and "=" in args:
            name, _, value = args.partition("=")
            found.setdefault(name.strip(), value.strip().strip('"'))
    return found


def expand(text: str, values: dict[str, str]) -> str:
    """``${NAME}`` / ``$NAME`` replaced by ARG defaults."""
    return re.sub(r"\$\{?(\w+)\}?", lambda m: values.get(m.group(1), m.group(0)), text)


def from_images(path: Path) -> list[str]:
    """The images of every ``FROM`` (ARG defaults substituted), stage names excluded."""
    values = args_defaults(path)
    stages: set[str] = set()
    out = []
    for keyword, args in instructions(path):
        if keyword == "FROM":
            parts = args.split()
            ref = expand(parts[0], values)
            if ref not in stages:
                out.append(ref)
            if len(parts) == 3 and parts[1].upper() == "AS":
                stages.add(parts[2])
    return out


def pyproject_packages() -> set[str]:
    """Canonical names of every package pyproject.toml declares (core and every extra)."""
    reqs = list(PYPROJECT["project"]["dependencies"])
    for extra in PYPROJECT["project"]["optional-dependencies"].values():
        reqs.extend(extra)
    return {re.sub(r"[-_.]+", "-", Requirement(r).name).lower() for r in reqs}


# -- .dockerignore (Docker's rules: last match wins, a match on a parent directory counts) ------


def _pattern_regex(pattern: str) -> re.Pattern[str]:
    out, i = "", 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out, i = out + "(?:.*/)?", i + 3
        elif pattern.startswith("**", i):
            out, i = out + ".*", i + 2
        elif pattern[i] == "*":
            out, i = out + "[^/]*", i + 1
        elif pattern[i] == "?":
            out, i = out + "[^/]", i + 1
        else:
            out, i = out + re.escape(pattern[i]), i + 1
    return re.compile(out)


def dockerignore_rules() -> list[tuple[bool, re.Pattern[str]]]:
    """``(is_exception, regex)`` per line of the repository's ``.dockerignore``."""
    rules = []
    for raw in (ROOT / ".dockerignore").read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        negate = line.startswith("!")
        pattern = line.lstrip("!").strip().strip("/")
        rules.append((negate, _pattern_regex(pattern)))
    return rules


def in_context(rel: str) -> bool:
    """Whether the build context (the repository root) includes the file ``rel``."""
    parts = rel.split("/")
    candidates = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    excluded = False
    for negate, regex in dockerignore_rules():
        if any(regex.fullmatch(c) for c in candidates):
            excluded = not negate
    return not excluded


# -- versions agree with pyproject.toml -----------------------------------------------------------


def test_every_image_runs_the_python_that_pyproject_declares() -> None:
    versions = {kind: args_defaults(path)["PYTHON_VERSION"] for kind, path in DOCKERFILES.items()}
    assert len(set(versions.values())) == 1, f"images disagree on Python: {versions}"
    version = versions["base"]
    assert version in SpecifierSet(PYPROJECT["project"]["requires-python"])
    major, minor = version.split(".")[:2]
    assert PYPROJECT["tool"]["ruff"]["target-version"] == f"py{major}{minor}"
    for kind in ("base", "serve"):
        assert set(from_images(DOCKERFILES[kind])) == {f"python:{version}-slim-bookworm"}


def test_dockerfiles_repeat_no_package_pin_of_pyproject() -> None:
    declared = pyproject_packages()
    for kind, path in DOCKERFILES.items():
        for keyword, args in instructions(path):
            if keyword != "RUN" or "pip install" not in args:
                continue
            for token in re.findall(
                r"([A-Za-z0-9][A-Za-z0-9._-]*)(?:==|>=|<=|~=|!=|<(?=\S)|>(?=\S))", args
            ):
                name = re.sub(r"[-_.]+", "-", token).lower()
                assert name not in declared, f"{kind}: {name} is pinned in pyproject.toml"


def test_extras_installed_by_the_images_exist() -> None:
    extras = set(PYPROJECT["project"]["optional-dependencies"])
    expected = {
        "base": {"tasks"},
        "train": {"tasks", "vllm"},
        "serve": {"serve", "providers"},
    }
    for kind, path in DOCKERFILES.items():
        if kind in LOCKED:  # the project's extras are resolved into the lock (below)
            installed = ",".join(sorted(lock_extras(kind)))
        else:
            text = " ".join(args for kw, args in instructions(path) if kw == "RUN")
            (installed,) = re.findall(r'pip install [^"]*"\.\[([a-z,]+)\]"', text)
        assert set(installed.split(",")) == expected[kind]
        assert set(installed.split(",")) <= extras
    # one Python layer for every pipeline task: the train image adds only vLLM to it
    tasks = {Requirement(r) for r in PYPROJECT["project"]["optional-dependencies"]["tasks"]}
    assert {str(r.name) for r in tasks} == {"conductor-core"}
    assert set().union(*(r.extras for r in tasks)) == {"pipelines", "data", "train", "providers"}
    # the serving image stays small: nothing pulls torch into it
    serve_extras = {"serve", "providers"}
    for extra in serve_extras:
        names = {Requirement(r).name for r in PYPROJECT["project"]["optional-dependencies"][extra]}
        assert not names & {"torch", "vllm", "transformers", "conductor-core"}


def test_train_image_cuda_release_matches_the_torch_wheel_index() -> None:
    values = args_defaults(DOCKERFILES["train"])
    major, minor = values["CUDA_VERSION"].split(".")[:2]
    assert values["TORCH_CUDA"] == f"cu{major}{minor}"
    assert expand(values["TORCH_INDEX_URL"], values).endswith(f"/whl/cu{major}{minor}")
    assert f"nvidia/cuda:{values['CUDA_VERSION']}-base-ubuntu24.04" in from_images(
        DOCKERFILES["train"]
    )
    gpu = PYPROJECT["project"]["optional-dependencies"]["gpu"]
    assert gpu == ["conductor-core[train,vllm]"]


def test_base_images_are_pinned_by_tag() -> None:
    for kind, path in DOCKERFILES.items():
        for ref in from_images(path):
            assert "$" not in ref, f"{kind}: unresolved {ref}"
            name, _, tag = ref.rpartition(":")
            assert name and tag and tag != "latest", f"{kind}: {ref} is not pinned"
            assert re.search(r"\d+\.\d+", tag), f"{kind}: {ref} has no version in its tag"


# -- the hashed lock files of the CPU images (scripts/lock.sh, `make lock`) ----------------------

# The images whose builder installs `pip install --require-hashes --no-deps -r <lock>`.
LOCKED = ("base", "serve")
LOCK_FILES = {kind: ROOT / "images" / kind / "requirements.lock" for kind in LOCKED}
PROJECT = canonicalize_name(PYPROJECT["project"]["name"])
# The images' Python on Linux x86_64: the environment pyproject's markers are evaluated in.
IMAGE_ENVIRONMENT = {
    **default_environment(),
    "implementation_name": "cpython",
    "platform_python_implementation": "CPython",
    "os_name": "posix",
    "sys_platform": "linux",
    "platform_system": "Linux",
    "platform_machine": "x86_64",
    "python_version": "3.11",
    "python_full_version": "3.11.14",
    "extra": "",
}
_HASH = re.compile(r"--hash=sha256:[0-9a-f]{64}")


def lock_entries(path: Path) -> dict[str, tuple[Requirement, list[str]]]:
    """``{canonical name: (requirement, its --hash options)}`` of a pip requirements file with
    hashes: continuation lines joined, comments dropped, one requirement per logical line."""
    if not path.is_file():
        pytest.fail(f"{path.relative_to(ROOT)} is missing: run `make lock` (scripts/lock.sh)")
    entries: dict[str, tuple[Requirement, list[str]]] = {}
    logical = ""
    for raw in path.read_text(encoding="utf-8").splitlines():
        line = re.sub(r"(^|\s)#.*$", "", raw).strip()
        if line.endswith("\\"):
            logical += line[:-1] + " "
            continue
        logical = (logical + line).strip()
        if not logical:
            continue
        spec, *options = logical.split()
        logical = ""
        assert not spec.startswith("-"), f"{path.name}: unexpected option line {spec!r}"
        req = Requirement(spec)
        name = canonicalize_name(req.name)
        assert name not in entries, f"{path.name}: {name} is listed twice"
        entries[name] = (req, options)
    return entries


def lock_pins(kind: str) -> dict[str, Version]:
    """``{canonical name: pinned version}`` of an image's lock."""
    return {
        name: Version(next(iter(req.specifier)).version)
        for name, (req, _) in lock_entries(LOCK_FILES[kind]).items()
    }


def lock_extras(kind: str) -> set[str]:
    """The extras of the project a lock was made for, from its first line
    (``# ... conductor-core[tasks] ...``, written by scripts/lock.sh)."""
    if not LOCK_FILES[kind].is_file():
        pytest.fail(f"images/{kind}/requirements.lock is missing: run `make lock`")
    first = LOCK_FILES[kind].read_text(encoding="utf-8").partition("\n")[0]
    found = re.search(rf"{PYPROJECT['project']['name']}\[([a-z,-]+)\]", first)
    assert found, f"images/{kind}/requirements.lock: no `conductor-core[...]` in {first!r}"
    return set(found.group(1).split(","))


def project_requirements(extras: set[str]) -> list[Requirement]:
    """The requirements ``pip install ".[extras]"`` starts from: the project's dependencies and
    those of the extras, self-references (``conductor-core[local]``) followed recursively, each
    kept only where its marker holds in the image (Linux x86_64, CPython 3.11)."""
    optional = PYPROJECT["project"]["optional-dependencies"]
    found: list[Requirement] = []
    seen: set[str] = set()
    todo = [(None, r) for r in PYPROJECT["project"]["dependencies"]]
    todo += [(extra, r) for extra in sorted(extras) for r in optional[extra]]
    seen.update(extras)
    while todo:
        extra, text = todo.pop(0)
        req = Requirement(text)
        if req.marker is not None and not req.marker.evaluate(
            {**IMAGE_ENVIRONMENT, "extra": extra or ""}
        ):
            continue
        if canonicalize_name(req.name) == PROJECT:
            for inner in sorted(req.extras - seen):
                seen.add(inner)
                todo += [(inner, r) for r in optional[inner]]
            continue
        found.append(req)
    return found


@pytest.mark.parametrize("kind", LOCKED)
def test_lock_pins_every_package_exactly_with_hashes(kind: str) -> None:
    entries = lock_entries(LOCK_FILES[kind])
    assert entries, f"images/{kind}/requirements.lock lists no package"
    for name, (req, options) in entries.items():
        specs = list(req.specifier)
        assert len(specs) == 1 and specs[0].operator == "==" and "*" not in specs[0].version, (
            f"images/{kind}/requirements.lock: {req} is not an exact `==` pin"
        )
        assert req.url is None and req.marker is None and not req.extras, f"{kind}: {req}"
        hashes = [o for o in options if _HASH.fullmatch(o)]
        assert hashes and len(hashes) == len(options), (
            f"images/{kind}/requirements.lock: {name} has no `--hash=sha256:` (or other options)"
        )
    # the project is installed on its own (`pip install --no-deps .`), never from an index
    assert PROJECT not in entries, f"images/{kind}/requirements.lock pins the project itself"


@pytest.mark.parametrize("kind", LOCKED)
def test_lock_satisfies_every_requirement_of_pyproject(kind: str) -> None:
    pins = lock_pins(kind)
    extras = lock_extras(kind)
    unmet = []
    for req in project_requirements(extras):
        name = canonicalize_name(req.name)
        pinned = pins.get(name)
        if pinned is None or not req.specifier.contains(pinned, prereleases=True):
            unmet.append(f"{req} (locked: {pinned or 'absent'})")
    assert not unmet, (
        f"images/{kind}/requirements.lock does not satisfy pyproject.toml's "
        f"{PYPROJECT['project']['name']}[{','.join(sorted(extras))}]: {'; '.join(unmet)}. "
        "Run `make lock` (scripts/lock.sh) and commit the lock."
    )


def test_base_lock_has_the_cpu_build_of_the_pinned_torch() -> None:
    (torch_req,) = [
        Requirement(r)
        for r in PYPROJECT["project"]["optional-dependencies"]["local"]
        if canonicalize_name(Requirement(r).name) == "torch"
    ]
    torch = lock_pins("base")["torch"]
    assert torch.local == "cpu", f"base lock: torch {torch} is not PyTorch's CPU build"
    assert torch_req.specifier.contains(torch), f"base lock: torch {torch}, pyproject {torch_req}"
    # the serving image stays small: nothing in its lock is torch or a model runtime
    heavy = {"torch", "vllm", "transformers", "nvidia-cublas", "triton"}
    assert not heavy & set(lock_pins("serve")), "serve lock pulls in a model runtime"


@pytest.mark.parametrize("kind", LOCKED)
def test_dockerfile_installs_its_lock_with_hashes_then_the_project_without_deps(
    kind: str,
) -> None:
    lock = f"images/{kind}/requirements.lock"
    steps = instructions(DOCKERFILES[kind])
    copied = " ".join(args for kw, args in steps if kw == "COPY" and "--from=" not in args)
    assert lock in copied.split(), f"{kind}: the Dockerfile does not COPY {lock}"
    runs = [args for kw, args in steps if kw == "RUN"]
    locked = [i for i, r in enumerate(runs) if re.search(rf"-r {re.escape(lock)}(\s|$)", r)]
    assert locked, f"{kind}: no `pip install ... -r {lock}`"
    install = runs[locked[0]]
    for flag in ("--require-hashes", "--no-deps"):
        assert flag in install.split(), f"{kind}: the lock is installed without {flag}"
    if kind == "base":  # torch's +cpu wheel: PyTorch's CPU index, next to PyPI
        assert '--extra-index-url "${TORCH_INDEX_URL}"' in install
    # then the project alone (no extras: nothing left to resolve), then pip check
    after = " && ".join(runs[locked[0] :])
    project = re.search(r"pip install ((?:--[\w-]+ )*)\.(?:\s|$)", after)
    assert project and "--no-deps" in project.group(1).split(), (
        f"{kind}: the project is not installed with `pip install --no-deps .` after the lock"
    )
    assert "pip check" in after[project.end() :], f"{kind}: no `pip check` after the installs"
    assert not re.search(r'pip install [^"]*"\.\[', " ".join(runs)), (
        f"{kind}: the project's extras are resolved at build time instead of from the lock"
    )


# -- security: non-root, no secrets ---------------------------------------------------------------


def test_images_run_as_a_non_root_user_and_bake_in_no_secret() -> None:
    secretish = re.compile(r"(KEY|TOKEN|SECRET|PASSWORD|CREDENTIAL)", re.IGNORECASE)
    for kind, path in DOCKERFILES.items():
        steps = instructions(path)
        users = [args for kw, args in steps if kw == "USER"]
        assert users, f"{kind}: no USER"
        uid = users[-1].split(":")[0]
        assert uid.isdigit() and int(uid) != 0, f"{kind}: runs as {users[-1]}"
        last_from = max(i for i, (kw, _) in enumerate(steps) if kw == "FROM")
        assert any(kw == "USER" for kw, _ in steps[last_from:]), f"{kind}: final stage is root"
        for kw, args in steps:
            if kw in ("ENV", "ARG"):
                names = re.findall(r"(\w+)=", args) or [args.split()[0]]
                assert not [n for n in names if secretish.search(n)], f"{kind}: {kw} {args}"


# -- build context ---------------------------------------------------------------------------------


def test_every_copied_path_exists_and_is_in_the_build_context() -> None:
    for kind, path in DOCKERFILES.items():
        copies = [args for kw, args in instructions(path) if kw in ("COPY", "ADD")]
        assert copies
        for args in copies:
            if "--from=" in args:
                continue
            sources = [s for s in args.split() if not s.startswith("--")][:-1]
            for source in sources:
                target = ROOT / source
                assert target.exists(), f"{kind}: COPY {source}: no such path"
                files = (
                    [target] if target.is_file() else [f for f in target.rglob("*") if f.is_file()]
                )
                assert files, f"{kind}: COPY {source}: empty"
                for file in files:
                    rel = file.relative_to(ROOT).as_posix()
                    if "__pycache__" in rel:
                        continue
                    assert in_context(rel), f"{kind}: {rel} is excluded by .dockerignore"


def test_every_package_of_the_project_is_copied_into_every_image() -> None:
    include = PYPROJECT["tool"]["setuptools"]["packages"]["find"]["include"]
    packages = {pattern.rstrip("*").split(".")[0] for pattern in include}
    assert "conductor_core" in packages
    for kind, path in DOCKERFILES.items():
        copied = {
            source.rstrip("/")
            for kw, args in instructions(path)
            if kw == "COPY" and "--from=" not in args
            for source in args.split()[:-1]
        }
        assert packages <= copied, f"{kind}: does not COPY {sorted(packages - copied)}"
    for name in ("pyproject.toml", PYPROJECT["project"]["readme"]):
        assert all(
            name in " ".join(a for kw, a in instructions(p) if kw == "COPY")
            for p in DOCKERFILES.values()
        )


def test_dockerignore_keeps_local_state_and_credentials_out() -> None:
    for rel in (".venv/bin/python", ".env", "runs/x/model.safetensors", "tests/conftest.py"):
        assert not in_context(rel), rel
    assert not in_context("conductor_core/__pycache__/x.cpython-311.pyc")
    assert in_context("conductor_core/cluster/images.py")


# -- conductor_core.cluster.images ----------------------------------------------------------------


def test_image_references_default_to_registry_and_package_version(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import conductor_core

    monkeypatch.delenv(images.REGISTRY_ENV, raising=False)
    monkeypatch.delenv(images.TAG_ENV, raising=False)
    for kind in KINDS:
        assert images.image(kind) == (
            f"{images.DEFAULT_REGISTRY}/conductor-{kind}:{conductor_core.__version__}"
        )
    assert images.KINDS == KINDS
    assert {images.BASE_IMAGE, images.TRAIN_IMAGE, images.SERVE_IMAGE} == {
        images.image("base"),
        images.image("train"),
        images.image("serve"),
    }


def test_image_references_honour_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(images.REGISTRY_ENV, "registry.example.com:5000/ml/")
    monkeypatch.setenv(images.TAG_ENV, "sha-0a1b2c3")
    assert images.image("train") == "registry.example.com:5000/ml/conductor-train:sha-0a1b2c3"
    monkeypatch.setenv(images.TAG_ENV, "")
    assert images.image("serve").endswith(f":{images.default_tag()}")


@pytest.mark.parametrize(
    ("var", "value"),
    [
        ("CONDUCTOR_IMAGE_TAG", "bad tag"),
        ("CONDUCTOR_IMAGE_TAG", "-x"),
        ("CONDUCTOR_IMAGE_REGISTRY", "Reg/UPPER"),
    ],
)
def test_invalid_overrides_name_the_variable(
    monkeypatch: pytest.MonkeyPatch, var: str, value: str
) -> None:
    monkeypatch.setenv(var, value)
    with pytest.raises(ValueError, match=var):
        images.image("base")


def test_unknown_kind_and_local_version_label(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValueError, match="unknown image kind"):
        images.image("gpu")  # type: ignore[arg-type]
    monkeypatch.delenv(images.TAG_ENV, raising=False)
    monkeypatch.setattr(images, "__version__", "0.2.0+g1234")
    assert images.image("base").endswith("/conductor-base:0.2.0-g1234")


def test_images_module_imports_only_the_standard_library() -> None:
    source = (ROOT / "conductor_core" / "cluster" / "images.py").read_text(encoding="utf-8")
    imported = set(re.findall(r"^(?:from|import) ([\w.]+)", source, re.MULTILINE))
    assert "conductor_core" in imported
    assert {m.split(".")[0] for m in imported - {"conductor_core"}} <= sys.stdlib_module_names
